// Package schemas defines nuon's file formats: the YAML source files that
// people and vendor CI write on a tenant's main branch, the JSON files that
// nuon writes, their Go types and JSON Schemas, and the loading and
// validation that report what is wrong by file, line and field.
//
// # Source files
//
// Main holds four kinds of file. [Load] reads them all from an [io/fs.FS]
// rooted at a checkout or commit of main. A file holds exactly one YAML
// document, its name ends in .yaml, and every name in it (app, component,
// channel, install, artifact) is a lower-case DNS label.
//
// nuon.yaml is the application and its components ([App]). A component's
// type names the plugin that applies it (terraform, helm, manifests or
// image), its repository is the vendor OCI repository its artifacts come
// from, dependsOn orders it after other components, and outputs names the
// values other components may read:
//
//	name: shop
//	components:
//	  - name: network
//	    type: terraform
//	    repository: registry.vendor.example/shop/network
//	    inputs:
//	      cidr: ${install.inputs.cidr}
//	    outputs: [vpc_id]
//	  - name: database
//	    type: terraform
//	    repository: registry.vendor.example/shop/database
//	    dependsOn: [network]
//	    inputs:
//	      vpc_id: ${components.network.outputs.vpc_id}
//
// nuon.yaml may also declare the sandbox the installs run on ([AppSandbox]):
// the Terraform module (sandboxes/local, sandboxes/aws-eks) that nuon
// install create applies first and the install's agent then manages as
// one more component, named sandbox ([SandboxComponent]), applied before
// every other:
//
//	sandbox:
//	  repository: registry.vendor.example/shop/sandbox
//	  inputs:
//	    single_nat_gateway: true
//
// It is versioned like a component: releases/sandbox.yaml holds one
// artifact per sandbox name (local, aws-eks), every channel pins it
// (sandbox: 0.2.0 under components), and an install may override the pin
// with its own sandbox.version (not versions).
//
// channels/<channel>.yaml pins the version of every component that the
// installs on the channel run ([Channel]); promotion is a pull request
// that edits a pin:
//
//	components:
//	  network: 1.0.0
//	  database: 1.1.0
//
// releases/<component>.yaml lists every released version of one component
// and the digests of its artifacts ([Release]); vendor CI appends to it:
//
//	component: database
//	versions:
//	  - version: 1.1.0
//	    artifacts:
//	      module:
//	        digest: sha256:302d3f57946a8a108ab58d03b00845f680b80f5ec0d9ca259371f281fbf3709c
//
// installs/<id>.yaml is one customer install ([Install]), whose id is the
// file's name: the channel it follows, its own input values, where it
// runs, its sandbox (which of the release's artifacts it runs, its own
// module inputs, and on AWS the maintenance role its agent assumes for
// sandbox upgrades), its registry, the public key its agent signs status
// with, and optional per-component version overrides. The registry may be
// left out when nuon.yaml declares a sandbox: the agent then copies
// artifacts into the sandbox's registry output (url/repository_prefix); a
// registry written here wins.
//
//	channel: stable
//	inputs:
//	  cidr: 10.10.0.0/16
//	cloud: {provider: aws, region: us-east-1, accountID: "111111111111"}
//	sandbox: {name: aws-eks, version: 0.4.0}
//	registry: 111111111111.dkr.ecr.us-east-1.amazonaws.com/nuon-acme
//	agentKey: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA… nuon-acme
//	versions:
//	  database: 1.1.0
//
// # Which files are read
//
// Main's root holds the tenant's other files too (modules, charts, CI);
// Load reads nuon.yaml and the folders channels/, releases/ and installs/
// there, and reports only names that differ from these in case or in a
// .yml extension (NUON.yaml, nuon.yml, Installs/): a typo is caught, not
// ignored. A source folder holds only:
//
//	<name>.yaml    a source file; name is a lower-case DNS label, the extension lower-case .yaml
//	README.md      documentation, never read
//	.gitkeep       keeps an empty folder in git, never read
//
// Anything else in a source folder is a problem naming it and what is
// expected: acme.YAML, acme.yml, acme.txt, a sub-folder, a symbolic link,
// a submodule. So are entries that git never writes but a crafted tree
// object can hold: names that are empty, "." or "..", or hold a slash, a
// NUL byte or a control character, and a name that appears twice in one
// folder. Such a name is shown as written (installs/../x.yaml) or, when it
// is not printable, quoted as a Go string (installs/"a\x1b[2J.yaml"), so
// that no file name can rewrite a terminal. [Classify] is the rule, for
// readers of main other than Load.
//
// A source file may be at most [DefaultMaxFileSize] (1 MiB; raised with
// [WithMaxFileSize]). The size is checked from the file's metadata (Stat;
// a git blob's size from its object header) before the file is read, and
// the read stops at the cap whatever Stat said: a 50 MB file costs
// nothing to refuse, where reading and parsing it took ~700 MB.
//
// # References
//
// A string anywhere in a component's inputs may hold references:
//
//	${install.id}                       the install's id
//	${install.inputs.NAME}              one of the install's inputs
//	${components.NAME.outputs.OUTPUT}   an output of another component
//	${install.sandbox.outputs.OUTPUT.KEY}  one key of a sandbox output
//	${install.sandbox.outputs.OUTPUT}   a whole sandbox output (an object)
//	${secrets.NAME}                     a secret of the install
//
// The renderer resolves ${install.id} and ${install.inputs.NAME}; the
// others stay in the rendered state and are resolved inside the install,
// by the agent from what it recorded (component outputs, the sandbox's
// outputs) or by the job (secrets), so secrets never leave it. A sandbox
// output and key must be in the outputs contract of sandboxes/README.md
// ([SandboxOutputs]: cluster, vpc, registry, dns, agent), and nuon.yaml
// must declare a sandbox; every component may read them (all depend on
// the sandbox). The sandbox's own inputs may reference only the install. A component may read the outputs only of components it
// depends on, directly or not, and only outputs they declare. "$${" is a
// literal "${". A string that is exactly one reference takes the
// referenced value's own type. [ParseRefs], [Substitute] and [WalkStrings]
// implement this.
//
// # Checks across files
//
// After each file passes its schema, Load checks that the files agree:
// component names are unique; dependsOn names other components and has no
// cycle; references name declared outputs of dependencies; every channel
// pins every component (and the sandbox, when declared), and every pin and
// install override names a released version of a component in nuon.yaml;
// an install's sandbox release has an artifact for its sandbox name, and
// an install without a declared sandbox names its registry; a release file's component
// is its file name, with no version twice; an install's id, if written, is
// its file name, its channel exists, it provides every input the
// components reference, and its agent key is an ed25519 key.
//
// [Open] does all of this but read the install files; [Source.EachInstall]
// then reads and checks them a worker per CPU at a time and hands each
// sound install to a function, rather than holding them all in
// [Source.Installs] as Load does. The renderer renders each as it comes.
//
// # Written files
//
// Nuon writes JSON files, each with apiVersion nuon.dev/v1 and a kind:
//
//	installs/<id>/install.json              InstallState    the renderer, on nuon/installs/<id>
//	installs/<id>/components/<name>.json    ComponentState  the renderer
//	job manifest                            Job             the agent, for nuon job run
//	job result                              JobResult       the job, for the agent
//	status.json                             InstallStatus   the agent, on nuon/status/<id>
//
// A job's operation is create, update or delete, or one that changes
// nothing (ReadOnly): drift (the result's Drift lists what differs per
// resource: changed, missing or extra), health (its Health: Ready,
// Progressing, Failed or Unknown) or debug (one allow-listed command in
// the job's Debug, answered in the result's Answer, bounded by maxBytes
// and marked truncated). Components set how drift is checked
// (DriftSettings: mode off, report or correct, default report; schedule
// default 1h), helm.wait and terraform.health; an install's Operations
// let its customer turn log requests, debug commands and drift checks
// off.
//
// A status says deferred ([Deferred]) while the agent holds the desired
// commit back on purpose: reason hold or window (approval and
// customer-approval are reserved), a message, since when, until when (the
// next maintenance window, when known) and the commit. Deferred is never
// failed.
//
// One file lives in the install rather than on main: the customer's
// policy ([CustomerPolicy], customer-policy.schema.json; package policy
// gives it meaning), which [DecodeLocated] parses and checks so that the
// checks after the schema report file:line too.
//
// Every file kind has a JSON Schema in [Files], named by the Schema…
// constants, which editors can use as they are. [ValidateJSON] checks a
// written file against its schema and its Go type before anyone relies on
// it.
//
// # Problems
//
// Load and ValidateJSON report every problem they find as [Problems], one
// a line, sorted by file, line and column:
//
//	nuon.yaml:27:11: components[2].type: must be one of terraform, helm, manifests or image, not "docker"
//	installs/acme.yaml:2:1: inputs: no input "db_size", which component "database" uses (nuon.yaml:23)
//
// Each [Problem] has the file's path, the 1-based line and column of the
// value it is about (of the key, for an unknown or misnamed key; the
// column is left out when the YAML parser gives only a line), the path of
// the field, and a message meant for the person who will fix it. A file
// that does not parse or does not match its schema is reported on its own
// and left out of the checks across files, which then do not report it a
// second time as missing.
package schemas
