package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/servescope/servescope/dev/proc"
)

// Procs runs the stack's services through dev/proc: each in its own process group (a Ctrl-C in the
// terminal reaches the driver only, which then stops each service in order), its output in
// <LogDir>/<name>.log, its pid file <PidDir>/<name>.pid, so that StopStale can stop a stack whose
// driver was killed.
type Procs struct {
	BinDir, LogDir, PidDir string

	// Exited receives, for every service that exits on its own (neither stopped, killed nor
	// expected to), an error naming it with its exit status and its log's tail. Sends never
	// block: a full channel drops the report.
	Exited chan error

	mu    sync.Mutex
	procs []*Proc
}

// Proc is one started service.
type Proc struct {
	Name string
	Log  string
	*proc.Process
}

// Start starts svc and waits until its health URL answers 200, or fails with the tail of its log
// when it exits first or does not serve within timeout (it is then killed).
func (ps *Procs) Start(ctx context.Context, svc Service, timeout time.Duration) (*Proc, error) {
	env := make([]string, 0, len(svc.Env))
	for k, v := range svc.Env {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	spec := proc.Spec{
		Name:         svc.Name,
		Path:         filepath.Join(ps.BinDir, svc.Bin),
		Args:         svc.Args,
		Env:          env,
		Log:          filepath.Join(ps.LogDir, svc.Name+".log"),
		PidFile:      filepath.Join(ps.PidDir, svc.Name+".pid"),
		ReadyTimeout: timeout,
		StopGrace:    svc.StopGrace,
		OnCrash: func(err error) {
			if ps.Exited == nil {
				return
			}
			select {
			case ps.Exited <- err:
			default:
			}
		},
	}
	if svc.Health != "" {
		spec.Ready = proc.HTTPReady(svc.Health)
	}
	p, err := proc.New(spec)
	if err != nil {
		return nil, err
	}
	if err := p.Start(ctx); err != nil {
		return nil, err
	}
	sp := &Proc{Name: svc.Name, Log: spec.Log, Process: p}
	ps.mu.Lock()
	ps.procs = append(ps.procs, sp)
	ps.mu.Unlock()
	return sp, nil
}

// Stop stops p (SIGTERM, then SIGKILL after its service's StopGrace) and forgets it.
func (ps *Procs) Stop(ctx context.Context, p *Proc) error {
	err := p.Stop(ctx)
	ps.forget(p)
	return err
}

// Kill ends p with SIGKILL, as a crash would, and forgets it.
func (ps *Procs) Kill(ctx context.Context, p *Proc) error {
	err := p.Kill(ctx)
	ps.forget(p)
	return err
}

func (ps *Procs) forget(p *Proc) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.procs = slices.DeleteFunc(ps.procs, func(q *Proc) bool { return q == p })
}

// StopAll stops every process still running, the last started first, and returns what went
// wrong (each process is stopped all the same).
func (ps *Procs) StopAll(ctx context.Context) error {
	var errs []error
	for {
		ps.mu.Lock()
		n := len(ps.procs)
		var p *Proc
		if n > 0 {
			p = ps.procs[n-1]
		}
		ps.mu.Unlock()
		if p == nil {
			return errors.Join(errs...)
		}
		if err := ps.Stop(ctx, p); err != nil {
			errs = append(errs, err)
		}
	}
}

// DriverPidFile is the pid file of the demo driver itself, in the pid directory.
const DriverPidFile = "driver.pid"

// WriteDriverPidFile records the calling process as the driver of the stack in pidDir.
func WriteDriverPidFile(pidDir string) error {
	return proc.WritePidFile(filepath.Join(pidDir, DriverPidFile), os.Getpid())
}

// RunningDriver reports the pid of another demo driver still alive, from its pid file: a second
// demo must not tear down the first one's stack under it.
func RunningDriver(pidDir string) (int, bool) {
	found, err := proc.Inspect(filepath.Join(pidDir, DriverPidFile), nil)
	if err != nil || found.State != proc.Running || found.Pid == os.Getpid() {
		return 0, false
	}
	return found.Pid, true
}

// StopStale stops the processes named by the pid files left in pidDir, each only when /proc shows
// the executable and command line its pid file recorded (see proc.StopPidFile). A running driver
// (DriverPidFile) is asked first, with SIGTERM and three times the grace, to tear its stack down
// itself; the services left are then stopped, SIGKILL following SIGTERM after grace. It removes
// the pid files and returns the names it stopped.
func StopStale(ctx context.Context, pidDir string, grace time.Duration) ([]string, error) {
	entries, err := os.ReadDir(pidDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pid directory: %w", err)
	}
	names := []string{DriverPidFile}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".pid") && e.Name() != DriverPidFile {
			names = append(names, e.Name())
		}
	}
	var stopped []string
	var errs []error
	for _, name := range names {
		wait := grace
		if name == DriverPidFile {
			wait = 3 * grace
		}
		found, err := proc.StopPidFile(ctx, filepath.Join(pidDir, name), nil, wait)
		if err != nil && !errors.Is(err, proc.ErrKilledAfterGrace) {
			errs = append(errs, err)
		}
		if found.State == proc.Running {
			stopped = append(stopped, strings.TrimSuffix(name, ".pid"))
		}
	}
	return stopped, errors.Join(errs...)
}
