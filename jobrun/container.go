package jobrun

import "nuon.dev/nuon/plugin/exchange"

// ExecutorName is the executor's file name (cmd/nuon-plugin-exec), in
// the job's image beside nuon and in the volume the image form's pod
// copies it to (agent/jobs, "Plugin images").
const ExecutorName = exchange.ExecutorName
