package proc

import (
	"context"
	"fmt"
)

// StartDetached starts spec's process so that it outlives the caller, as a dev server does: in
// a new session (no controlling terminal; it leads its own process group), its output appended
// to spec.Log, its pid file written. It waits for spec.Ready like Process.Start and returns the
// pid. When the process exits during its start or is not ready in time, it is killed, the pid
// file removed, and the error carries the log's tail.
//
// Once it has returned, the process is left to itself: find it again with Inspect and stop it
// with StopPidFile. Its pid file stays when it exits on its own, so the next Inspect tells that
// it died (NotRunning) rather than that it was never started. spec.OnCrash is not used.
func StartDetached(ctx context.Context, spec Spec) (int, error) {
	if err := spec.check(); err != nil {
		return 0, err
	}
	if spec.PidFile == "" {
		return 0, fmt.Errorf("proc: %s: a detached process needs Spec.PidFile", spec.Name)
	}
	if found, err := Inspect(spec.PidFile, nil); err != nil {
		return 0, err
	} else if found.State == Running {
		return 0, fmt.Errorf("start %s: already running (pid %d, pid file %s)", spec.Name, found.Pid, spec.PidFile)
	}
	r, err := launch(&spec, true)
	if err != nil {
		return 0, err
	}
	// Reap the child while this process lives, so an exit during the start is seen at once.
	go func() {
		err := r.cmd.Wait()
		r.mu.Lock()
		r.exited, r.err = true, err
		r.mu.Unlock()
		close(r.done)
	}()
	if err := waitReady(ctx, &spec, r.pid, r.exitErr); err != nil {
		killGroup(r.pid)
		<-r.done
		removePidFile(spec.PidFile, r.pid)
		return 0, fmt.Errorf("start %s: %w", spec.Name, bindError(&spec, r, err))
	}
	if r.finished() {
		removePidFile(spec.PidFile, r.pid)
		return 0, fmt.Errorf("start %s: %w", spec.Name, bindError(&spec, r, startExitErr(&spec, r)))
	}
	return r.pid, nil
}

// AwaitReady waits, as Start does, for spec.Ready to answer for the process spec.PidFile names:
// one started earlier, by StartDetached or by another program (a pid-only file is checked against
// spec itself; see Inspect). It fails when there is no such process, when it exits meanwhile, or
// when it is not ready within spec.ReadyTimeout, with the log's tail; it never signals the process.
func AwaitReady(ctx context.Context, spec Spec) error {
	if err := spec.check(); err != nil {
		return err
	}
	found, err := Inspect(spec.PidFile, &spec)
	if err != nil {
		return err
	}
	if found.State != Running {
		return fmt.Errorf("%s: %s (pid file %s)", spec.Name, found.State, spec.PidFile)
	}
	exited := func() error {
		if f, err := Inspect(spec.PidFile, &spec); err == nil && f.State != Running {
			return fmt.Errorf("%s (pid %d) exited while being checked", spec.Name, found.Pid)
		}
		return nil
	}
	return waitReady(ctx, &spec, found.Pid, exited)
}
