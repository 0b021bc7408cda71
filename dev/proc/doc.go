// Package proc runs and supervises the child processes of servescope's development harness: the
// NATS and ClickHouse servers of the tests, the demo and the chaos suite, the services those
// start, and the shared dev servers of scripts/dev-services. It is the one place that starts,
// watches, stops and cleans up after a process; everything else describes what to run in a Spec.
//
// What it guarantees, for a [Process] (a child the caller supervises for as long as it runs) and
// for [StartDetached] (a child that outlives the caller):
//
//   - Own process group. The child leads a new process group (a new session when detached), so
//     a Ctrl-C in the terminal reaches the caller alone, and every signal proc sends reaches the
//     child and whatever it started.
//   - Environment. The child gets the caller's environment plus Spec.Env (a key in Spec.Env
//     wins; with Spec.ClearEnv, Spec.Env alone), the working directory Spec.Dir and /dev/null as
//     standard input.
//   - One log. Standard output and standard error are appended to Spec.Log through a descriptor
//     the child holds itself, so it keeps logging when the caller is gone (a detached server, a
//     driver killed with SIGKILL) and nothing is lost in a pipe. The log is rotated when the
//     process starts (a restart included): a file of [DefaultRotation]'s size or more becomes
//     Log.1, Log.1 becomes Log.2 and so on, and the oldest beyond the kept count is removed. The
//     same policy bounds the logs a server writes itself (see dev/servers).
//   - Readiness. Start returns nil only once Spec.Ready has answered nil; a process that exits
//     first, or is not ready within Spec.ReadyTimeout, or whose context ends, is killed and
//     reaped, and the error says which, with the tail of its log.
//   - Stop and Kill. Stop sends SIGTERM to the group and SIGKILL after Spec.StopGrace; Kill sends
//     SIGKILL. Both return once the process has exited and been reaped; neither leaves it
//     running when it returns nil.
//   - Crash. An exit that neither Stop, Kill nor ExpectExit announced, after Start returned nil,
//     is a crash: Crashed reports it and Spec.OnCrash is called once with an error naming the
//     process, its exit status and its log's tail.
//   - Leftovers. Spec.PidFile records the pid, the executable and the command line, and is
//     removed when the process is seen to exit. [Inspect] and [StopPidFile] act on a pid file
//     left by an earlier run only when /proc shows the same executable running the same command
//     line, so a stale file or a pid the kernel gave to another program is never signalled. A
//     process that must not outlive its caller at all (a test's server) sets Spec.DieWithCaller
//     instead: the kernel kills it when the caller's process ends, however it ends.
//
// The package keeps no state of its own: everything lives in the values the caller holds.
// Linux only (process groups, /proc).
package proc
