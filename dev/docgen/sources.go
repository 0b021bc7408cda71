package docgen

// This file is the one place that says what the generated pages document. A new settings struct
// (a struct with `env` tags that a program reads with config.Load or caarlos0/env) goes into
// Programs, a block several programs embed into Shared, a new binary into Binaries; then run
// `go run ./dev/cmd/docgen`. TestEverySettingsStructIsListed fails while a struct with `env`
// tags is missing here, and TestPagesAreCurrent while a page is not regenerated.

// Struct names a Go struct whose `env`-tagged fields are settings: Dir is its package's directory
// relative to the repository root, Type its name.
type Struct struct {
	Dir, Type string
	// Used says which commands of a program read it, when not all of them do.
	Used string
}

// Block is a settings struct several programs embed: it gets one table of its own, and each
// program's section links to the blocks it reads instead of repeating them.
type Block struct {
	Struct
	// Title is the block's heading; About one paragraph above its table.
	Title, About string
}

// Program is one binary's settings.
type Program struct {
	// Name is the binary's name and the section's heading; Main its main package's directory.
	Name, Main string
	// About is one paragraph above the program's tables.
	About string
	// Prefix is prepended to every variable name (caarlos0/env's Options.Prefix).
	Prefix string
	// Structs are the settings the program reads, in the order its tables are printed.
	Structs []Struct
	// Sim marks a stand-in for the outside world (the demo and the tests), documented after the
	// production programs; its variables may lack a description.
	Sim bool
}

// Shared lists the settings blocks the programs embed.
var Shared = []Block{
	{
		Struct: Struct{Dir: "internal/config", Type: "NATS"},
		Title:  "NATS",
		About: "How a program reaches NATS JetStream, and the limits the setup step (`servescope migrate up`, " +
			"`servescope streams up`) gives the streams and the lease bucket it owns. A program other than the setup " +
			"step only compares `SERVESCOPE_STREAM_*` with the stream it finds and logs a difference " +
			"([the setup step](operations/upgrades.md#the-setup-step-owns-the-streams)).",
	},
	{
		Struct: Struct{Dir: "internal/config", Type: "ClickHouse"},
		Title:  "ClickHouse",
		About: "How a program reaches ClickHouse over the native protocol. Give each service its own account " +
			"([least-privilege accounts](operations/security.md#least-privilege-accounts)); on a sharded schema see " +
			"[the cluster page](operations/cluster.md#clickhouse-shards).",
	},
	{
		Struct: Struct{Dir: "internal/config", Type: "Consumer"},
		Title:  "Durable consumer",
		About: "The consumer's durable consumer. The consumer batches by these settings, and the setup step " +
			"creates the durable consumer with the `AckWait` and `MaxAckPending` they imply, so give both the same values.",
	},
}

// Programs lists every binary's settings, production programs in the order of the data flow.
var Programs = []Program{
	{
		Name: "gateway", Main: "services/gateway",
		About: "The recording OpenAI-compatible proxy in front of vLLM, and the ingest endpoint of application records " +
			"(`services/gateway/README.md` says what it records and what it changes in an answer).",
		Structs: []Struct{{Dir: "services/gateway/server", Type: "Config"}},
	},
	{
		Name: "collector", Main: "services/collector",
		About:   "The engine side: scrapes vLLM's `/metrics`, receives its OTLP spans (and applications' spans), follows its log.",
		Structs: []Struct{{Dir: "services/collector/collector", Type: "Config"}},
	},
	{
		Name: "consumer", Main: "services/consumer",
		About: "Moves the events from NATS JetStream into ClickHouse " +
			"([how it batches and what it does with a refused row](architecture.md#consumer)).",
		Structs: []Struct{{Dir: "services/consumer/app", Type: "Config"}},
	},
	{
		Name: "detector", Main: "services/detector",
		About:   "Evaluates the alert rules against ClickHouse and sends the alerts ([alerting](alerting.md)).",
		Structs: []Struct{{Dir: "services/detector/service", Type: "Config"}},
	},
	{
		Name: "console", Main: "services/console",
		About:   "The web console over ClickHouse ([console](console.md)).",
		Structs: []Struct{{Dir: "services/console/server", Type: "Config"}},
	},
	{
		Name: "servescope", Main: "services/servescope",
		About: "The operator CLI ([command reference](cli.md#servescope)). `migrate`, `diagnose` and `postmortem` " +
			"read the [ClickHouse](#clickhouse) settings alone.",
		Structs: []Struct{
			{Dir: "services/servescope", Type: "streamsConfig", Used: "`servescope streams up|check` and `migrate up`"},
			{Dir: "services/servescope", Type: "rulesConfig", Used: "`servescope rules check|test`"},
			{Dir: "services/servescope", Type: "accessSettings", Used: "`servescope access users-xml|apply`"},
		},
	},
	{
		Name: "vllmsim", Main: "sim/vllmsim", Prefix: "VLLMSIM_", Sim: true,
		About: "The vLLM simulator of the demo, the tests and compose's `sim` profile. Each variable is a flag " +
			"(`VLLMSIM_MAX_NUM_SEQS` is `--max-num-seqs`, a flag given wins): [its help](cli.md#vllmsim) says what each does.",
		Structs: []Struct{{Dir: "sim/vllmsim", Type: "config"}},
	},
	{
		Name: "ragdemo", Main: "sim/ragdemo", Sim: true,
		About:   "The demo's RAG application (`POST /ask`); it publishes `app.record`s, reports through OpenTelemetry, or both.",
		Structs: []Struct{{Dir: "sim/ragdemo", Type: "settings"}},
	},
}

// Binaries are the programs whose --help the command-line page shows, the operator's CLI first,
// then the services in the order of the data flow, then the stand-ins.
var Binaries = []string{
	"services/servescope",
	"services/gateway", "services/collector", "services/consumer", "services/detector", "services/console",
	"sim/vllmsim", "sim/loadgen", "sim/ragdemo",
}
