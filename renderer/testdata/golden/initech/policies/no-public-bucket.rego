# No plan may make a bucket public: a public ACL, or a public access block
# that lets public ACLs or policies through.
package nuon.plans.buckets

import rego.v1

public_acls := {"public-read", "public-read-write", "authenticated-read"}

deny contains msg if {
	some rc in input.plan.resource_changes
	rc.type in {"aws_s3_bucket", "aws_s3_bucket_acl"}
	rc.change.after.acl in public_acls
	msg := sprintf("%s: %s would be public (acl %s; no-public-bucket.rego)", [input.component, rc.address, rc.change.after.acl])
}

deny contains msg if {
	some rc in input.plan.resource_changes
	rc.type == "aws_s3_bucket_public_access_block"
	some setting in ["block_public_acls", "block_public_policy", "ignore_public_acls", "restrict_public_buckets"]
	rc.change.after[setting] == false
	msg := sprintf("%s: %s sets %s to false (no-public-bucket.rego)", [input.component, rc.address, setting])
}
