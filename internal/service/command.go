package service

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// ExitError ends a binary with a given exit status.
type ExitError struct {
	// Code is the exit status.
	Code int
	// Err is logged at error level when not nil.
	Err error
	// usage marks a usage error: printed as a line with a pointer to --help, not logged.
	usage bool
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Exit returns an error that ends the binary with code, logging err when not nil.
func Exit(code int, err error) error { return &ExitError{Code: code, Err: err} }

// UsageError returns an error that ends the binary with status 2 (bad usage), printing err and a
// pointer to --help on standard error.
func UsageError(err error) error { return &ExitError{Code: 2, Err: err, usage: true} }

// SignalContext returns a context that ends at the first SIGINT or SIGTERM, whose cause names
// the signal. From then on the signals have their default effect again, so a second one ends
// the process at once (for a stop that takes too long). stop releases the signals.
func SignalContext() (ctx context.Context, stop context.CancelFunc) {
	ctx, stop = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	return ctx, stop
}

// Command is a binary built on package flag: the program's own flags and the common ones
// (Options), --help, --version, the logger, and the exit status.
type Command struct {
	// Name is the program's name: in --help, --version, error lines and the build-info metric.
	Name string
	// Usage is printed by --help above the flags: a synopsis line and what the program does.
	Usage string
	// Flags is where the program defines its own flags before Execute.
	Flags *flag.FlagSet
	// Run does the program's work with the logger and the arguments left after the flags. Its
	// error decides the exit status: nil 0, an ExitError its Code, any other 1 (logged).
	Run func(ctx context.Context, log *slog.Logger, args []string) error
	// Stdout (--version) and Stderr (the log, usage and errors); nil means the process's.
	Stdout, Stderr io.Writer

	opts Options
}

// NewCommand returns a command with the common flags defined.
func NewCommand(name, usage string) *Command {
	c := &Command{Name: name, Usage: usage, Flags: flag.NewFlagSet(name, flag.ContinueOnError), opts: DefaultOptions()}
	c.opts.Register(c.Flags)
	c.Flags.Usage = func() {
		out := c.Flags.Output()
		if c.Usage != "" {
			fmt.Fprintln(out, c.Usage)
			fmt.Fprintln(out)
		}
		fmt.Fprintln(out, "Flags:")
		c.Flags.PrintDefaults()
	}
	return c
}

// Options returns the common options as parsed (valid once Execute has parsed the flags).
func (c *Command) Options() Options { return c.opts }

// Main executes the command with the process's arguments and a context that ends at SIGINT or
// SIGTERM, and exits with its status.
func (c *Command) Main() {
	ctx, stop := SignalContext()
	code := c.Execute(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// Execute parses args, answers --help (0) and --version (0), refuses bad flags (2), builds the
// logger, runs the command and returns the exit status.
func (c *Command) Execute(ctx context.Context, args []string) int {
	stdout, stderr := orStd(c.Stdout, os.Stdout), orStd(c.Stderr, os.Stderr)
	c.Flags.SetOutput(stderr)
	if err := c.Flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2 // package flag printed the error and the usage
	}
	if c.opts.Version {
		fmt.Fprintln(stdout, Version(c.Name))
		return 0
	}
	log, err := c.opts.Logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", c.Name, err)
		return 2
	}
	return exitStatus(c.Name, stderr, log, c.Run(ctx, log, c.Flags.Args()))
}

// exitStatus turns a run's error into the exit status, telling the user about it.
func exitStatus(name string, stderr io.Writer, log *slog.Logger, err error) int {
	if err == nil {
		return 0
	}
	var ee *ExitError
	if !errors.As(err, &ee) {
		log.Error(name+" failed", "err", err)
		return 1
	}
	switch {
	case ee.usage:
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", name, ee.Err, name)
	case ee.Err != nil:
		log.Error(name+" failed", "err", ee.Err)
	}
	return ee.Code
}

func orStd(w, std io.Writer) io.Writer {
	if w == nil {
		return std
	}
	return w
}

// Cobra gives a cobra command tree what Command gives a flag set: --log.level and --log.format
// on every subcommand, --version on the root, and the logger (Logger) built before any
// subcommand runs.
type Cobra struct {
	// Root is the command tree.
	Root *cobra.Command
	// UsageCode is the exit status of a usage error (a bad flag, a wrong number of arguments, an
	// unknown subcommand); NewCobra sets 2.
	UsageCode int
	// Stdout and Stderr; nil means the process's.
	Stdout, Stderr io.Writer

	name string
	opts Options
	log  *slog.Logger
}

// NewCobra prepares root, the command tree of the program name. A PersistentPreRunE already set
// on root runs after the logger is built.
func NewCobra(name string, root *cobra.Command) *Cobra {
	c := &Cobra{Root: root, UsageCode: 2, name: name, opts: DefaultOptions()}
	c.opts.RegisterLogging(root.PersistentFlags())
	root.Version = "-" // makes cobra define --version; the template prints the whole text
	root.SetVersionTemplate(Version(name) + "\n")
	prev := root.PersistentPreRunE
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		log, err := c.opts.Logger(orStd(c.Stderr, os.Stderr))
		if err != nil {
			return UsageError(err)
		}
		c.log = log
		if prev != nil {
			return prev(cmd, args)
		}
		return nil
	}
	return c
}

// Logger is the logger the flags describe; valid inside a subcommand's Run.
func (c *Cobra) Logger() *slog.Logger {
	if c.log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.log
}

// Main executes the tree with the process's arguments and a context that ends at SIGINT or
// SIGTERM, and exits with its status.
func (c *Cobra) Main() {
	ctx, stop := SignalContext()
	code := c.Execute(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// Execute runs the tree with args and returns the exit status: 0, an ExitError's Code,
// UsageCode for a usage error, else 1. Errors are printed as one line "name: error".
func (c *Cobra) Execute(ctx context.Context, args []string) int {
	stdout, stderr := orStd(c.Stdout, os.Stdout), orStd(c.Stderr, os.Stderr)
	c.Root.SetOut(stdout)
	c.Root.SetErr(stderr)
	c.Root.SetArgs(args)
	c.Root.SilenceUsage = true
	c.Root.SilenceErrors = true
	c.Root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return UsageError(err) })
	usageArgs(c.Root)
	cmd, err := c.Root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	var ee *ExitError
	switch {
	case errors.As(err, &ee) && ee.usage:
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", c.name, ee.Err, cmd.CommandPath())
		return c.UsageCode
	case errors.As(err, &ee):
		if ee.Err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", c.name, ee.Err)
		}
		return ee.Code
	case strings.HasPrefix(err.Error(), "unknown command "):
		// cobra's only usage error without a type of its own.
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", c.name, err, c.name)
		return c.UsageCode
	default:
		fmt.Fprintf(stderr, "%s: %v\n", c.name, err)
		return 1
	}
}

// usageArgs makes the argument checks of cmd and its subcommands return usage errors.
func usageArgs(cmd *cobra.Command) {
	if check := cmd.Args; check != nil {
		cmd.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				var ee *ExitError
				if errors.As(err, &ee) {
					return err
				}
				return UsageError(err)
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		usageArgs(sub)
	}
}
