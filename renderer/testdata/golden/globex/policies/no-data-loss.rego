# No plan may destroy a database or a PersistentVolumeClaim: a delete or a
# replace of one is denied, whoever approves it. Take the data out first,
# then change this policy on main (reviewed like any change).
package nuon.plans.data

import rego.v1

stateful_types := {
	"aws_db_instance",
	"aws_rds_cluster",
	"aws_dynamodb_table",
	"kubernetes_persistent_volume_claim",
	"kubernetes_persistent_volume_claim_v1",
}

deny contains msg if {
	some rc in input.plan.resource_changes
	rc.type in stateful_types
	"delete" in rc.change.actions
	msg := sprintf("%s: %s would destroy %s (no-data-loss.rego)", [input.component, concat("/", rc.change.actions), rc.address])
}

# Any other delete is allowed, but never without an approval.
warn contains msg if {
	some rc in input.plan.resource_changes
	not rc.type in stateful_types
	rc.mode == "managed"
	"delete" in rc.change.actions
	msg := sprintf("%s: %s would be destroyed", [input.component, rc.address])
}
