// chlaunch runs the ClickHouse engine shipped in libchdb.so as a network
// server for development and tests, where neither Docker nor a clickhouse
// binary is available.
//
// libchdb exposes clickhouse-local through chdb_query_cmdline(argc, argv).
// Given --tcp_port/--http_port/--listen_host, a query that starts the TCP and
// HTTP listeners and then never ends keeps the engine serving until this
// process exits. The keep-alive query uses FORMAT Null so no result
// accumulates in memory.
//
// Usage:
//
//	chlaunch --lib PATH/libchdb.so --path DATA_DIR [--tcp-port 9000]
//	         [--http-port 8123] [--listen-host 127.0.0.1] [--log FILE]
//	         [--config FILE] [--log-level LEVEL]
//
// Every flag has an environment fallback read when the flag is absent:
// CHLAUNCH_LIB, CHLAUNCH_PATH, CHLAUNCH_TCP_PORT, CHLAUNCH_HTTP_PORT,
// CHLAUNCH_LISTEN_HOST, CHLAUNCH_LOG, CHLAUNCH_CONFIG, CHLAUNCH_LOG_LEVEL.
//
// --config passes an engine configuration file (clickhouse-local
// --config-file). Without one the engine reads config.xml from the working
// directory if there is one, and otherwise keeps no server log at all: a
// crash then leaves nothing but a dead process. The config is where the
// <logger> section goes (log, errorlog, size, count), which is the only way
// to get the engine's own messages, including its fatal-signal report with
// the stack and the query that crashed, into a size-bounded file; the command
// line of clickhouse-local knows only --logger.log and no rotation settings.
// --log-level (default information) is needed next to it because
// clickhouse-local otherwise overrides the config's <level> with trace.
//
// Exit status: 0 after SIGTERM, SIGINT or SIGHUP; 1 when the engine stopped
// serving on its own, which is either a failed start (the engine writes its
// message, e.g. "Code: 210 ... Address already in use" or "Code: 76 ...
// Cannot lock file", to stderr) or a client ending the keep-alive query
// (KILL QUERY, SYSTEM SHUTDOWN); 2 on bad usage or when libchdb cannot be
// loaded. A fatal signal in the engine (SIGSEGV, SIGABRT, ...) ends the
// process by that signal with no chlaunch line: the engine's handler tells
// connected clients "The server is shutting down due to a fatal error" and
// writes the report (signal, query, stack) only to the log of --config.
// Failed native connections no longer do that (see "connection errors must
// not end the server" below); each is one chlaunch line, at most 20 a minute.
//
// SIGTERM and SIGINT end the process at once with _exit: the engine's own
// graceful cancel waits up to 5 s for connected clients and then exits 1,
// which makes restarts in fault tests slow and the exit status meaningless.
// Acknowledged inserts are already durable at that point, so nothing is lost.
// The signals are blocked before the library is loaded, so every engine
// thread inherits the mask and only the sigwait thread below receives them.

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

// chdb_result is opaque in chdb.h; only these two entry points are used.
typedef struct chdb_result chdb_result;
typedef chdb_result *(*query_cmdline_fn)(int argc, char **argv);
typedef const char *(*result_error_fn)(chdb_result *result);

static const char keepalive_query[] =
    "SYSTEM START LISTEN TCP; "
    "SYSTEM START LISTEN HTTP; "
    "SELECT sleepEachRow(1) FROM system.numbers "
    "SETTINGS function_sleep_max_microseconds_per_block = 0, max_execution_time = 0 "
    "FORMAT Null";

static void usage(FILE *out) {
    fprintf(out,
            "usage: chlaunch --lib LIBCHDB_SO --path DATA_DIR [--tcp-port N] [--http-port N]\n"
            "                [--listen-host HOST] [--log FILE] [--config FILE] [--log-level LEVEL]\n"
            "env fallbacks: CHLAUNCH_LIB CHLAUNCH_PATH CHLAUNCH_TCP_PORT CHLAUNCH_HTTP_PORT\n"
            "               CHLAUNCH_LISTEN_HOST CHLAUNCH_LOG CHLAUNCH_CONFIG CHLAUNCH_LOG_LEVEL\n");
}

static const char *env_or(const char *name, const char *fallback) {
    const char *v = getenv(name);
    return (v != NULL && v[0] != '\0') ? v : fallback;
}

static int valid_port(const char *s) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    return errno == 0 && end != s && *end == '\0' && v > 0 && v < 65536;
}

static void *signal_waiter(void *arg) {
    sigset_t *set = arg;
    for (;;) {
        int sig = 0;
        if (sigwait(set, &sig) == 0) {
            fprintf(stderr, "chlaunch: received signal %d, exiting\n", sig);
            fflush(stderr);
            _exit(0);
        }
    }
    return NULL;
}

// redirect_output appends stdout and stderr to path, so the engine's own
// messages (which it writes to stderr only) land in the log file.
static int redirect_output(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "chlaunch: open log %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0) {
        fprintf(stderr, "chlaunch: redirect output to %s: %s\n", path, strerror(errno));
        close(fd);
        return -1;
    }
    close(fd);
    setvbuf(stdout, NULL, _IOLBF, 0);
    return 0;
}

// ---- connection errors must not end the server ---------------------------
//
// The engine is clickhouse-local, which installs a Poco::ErrorHandler named
// KillingErrorHandler: every exception that leaves a Poco thread calls
// std::terminate. clickhouse-local never expected to serve connections, but
// with SYSTEM START LISTEN TCP the native protocol handler runs on Poco
// threads, and like in clickhouse-server it lets the exceptions of a failed
// connection setup escape to that handler. clickhouse-server's handler logs
// them; here they abort the whole process. Measured with 26.7.3-stable.1,
// each of these ends the server at once with "Terminate called for uncaught
// exception" and SIGABRT, and every connected client gets "The server is
// shutting down due to a fatal error":
//   - a native connection whose default database does not exist (code 81),
//     e.g. a pooled connection opened after a test dropped its database;
//   - a wrong password (code 516);
//   - a client that closes or resets the socket during the handshake (codes
//     33, 210, 1000), e.g. a dial timeout on a loaded machine or a killed
//     client process.
// The HTTP interface catches its own errors and is not affected.
//
// The handler's class cannot be reached by name (the library exports only
// the chdb_* C functions), so the launcher finds its vtable through the
// typeinfo name string "19KillingErrorHandler" (typeinfo name -> typeinfo
// object -> vtable) and points the three exception() slots at functions that
// log the exception and return, which is what clickhouse-server does. The
// failing connection is closed; the server and its other clients carry on.
// If the vtable is not found (another engine build), the launcher says so and
// runs the engine unchanged.

struct segment {
    uintptr_t start;
    uintptr_t end;
    int exec;
};

struct segment_list {
    const char *lib;
    struct segment seg[32];
    int n;
};

static int collect_segments(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct segment_list *list = data;
    if (info->dlpi_name == NULL || strcmp(info->dlpi_name, list->lib) != 0) {
        return 0;
    }
    for (int i = 0; i < info->dlpi_phnum && list->n < 32; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_R)) {
            continue;
        }
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        list->seg[list->n++] = (struct segment){start, start + ph->p_memsz, (ph->p_flags & PF_X) != 0};
    }
    return 1;
}

// find_word returns the address of the first 8-byte aligned word equal to
// value in the library's segments, or 0.
static uintptr_t find_word(const struct segment_list *list, uintptr_t value) {
    for (int i = 0; i < list->n; i++) {
        uintptr_t p = (list->seg[i].start + 7) & ~(uintptr_t)7;
        for (; p + sizeof(uintptr_t) <= list->seg[i].end; p += sizeof(uintptr_t)) {
            if (*(const uintptr_t *)p == value) {
                return p;
            }
        }
    }
    return 0;
}

static int in_exec_segment(const struct segment_list *list, uintptr_t addr) {
    for (int i = 0; i < list->n; i++) {
        if (list->seg[i].exec && addr >= list->seg[i].start && addr < list->seg[i].end) {
            return 1;
        }
    }
    return 0;
}

typedef const char *(*what_fn)(const void *exc);

// A client that keeps reconnecting to a dropped database fails hundreds of
// connections a second; at most this many are logged per minute, then a count.
enum { conn_log_per_minute = 20 };

static pthread_mutex_t conn_log_mu = PTHREAD_MUTEX_INITIALIZER;
static time_t conn_log_window;
static int conn_log_shown;
static long conn_log_suppressed;

// log_connection_failure writes one line about a failed connection, what()
// of its exception when exc is not NULL (Poco::Exception and DB::Exception
// derive from std::exception, whose vtable has what() in slot 2, after the
// two destructors).
static void log_connection_failure(const void *exc) {
    time_t now = time(NULL);
    pthread_mutex_lock(&conn_log_mu);
    if (now - conn_log_window >= 60) {
        if (conn_log_suppressed > 0) {
            fprintf(stderr, "chlaunch: %ld more failed native connections in the last minute not shown\n",
                    conn_log_suppressed);
        }
        conn_log_window = now;
        conn_log_shown = 0;
        conn_log_suppressed = 0;
    }
    if (conn_log_shown >= conn_log_per_minute) {
        conn_log_suppressed++;
        pthread_mutex_unlock(&conn_log_mu);
        return;
    }
    conn_log_shown++;
    const char *msg = "unknown exception";
    if (exc != NULL) {
        what_fn what = (*(what_fn *const *)exc)[2];
        msg = what(exc);
    }
    // One line per connection: the first line of the message (the rest is
    // advice meant for ClickHouse Cloud users), cut at 300 bytes.
    char line[301];
    size_t n = 0;
    for (const char *c = msg != NULL ? msg : "(no message)"; *c != '\0' && *c != '\n' && n < sizeof(line) - 1; c++) {
        line[n++] = *c;
    }
    line[n] = '\0';
    fprintf(stderr, "chlaunch: a native connection failed and was closed (the engine would have aborted): %s\n", line);
    fflush(stderr);
    pthread_mutex_unlock(&conn_log_mu);
}

// The replacements for KillingErrorHandler::exception(const Poco::Exception&),
// exception(const std::exception&) and exception(); `self` is the handler.
static void on_poco_exception(void *self, const void *exc) {
    (void)self;
    log_connection_failure(exc);
}

static void on_std_exception(void *self, const void *exc) {
    (void)self;
    log_connection_failure(exc);
}

static void on_unknown_exception(void *self) {
    (void)self;
    log_connection_failure(NULL);
}

// disarm_killing_error_handler patches the engine as described above; it
// returns 0 on success and -1 (with the reason on stderr) otherwise.
static int disarm_killing_error_handler(const char *lib) {
    static const char name[] = "\0" "19KillingErrorHandler";
    struct segment_list list = {.lib = lib, .n = 0};
    if (dl_iterate_phdr(collect_segments, &list) == 0 || list.n == 0) {
        fprintf(stderr, "chlaunch: %s not found among the loaded objects\n", lib);
        return -1;
    }
    uintptr_t name_addr = 0;
    for (int i = 0; i < list.n && name_addr == 0; i++) {
        // sizeof(name) counts the leading and the trailing NUL: a whole string.
        void *hit = memmem((const void *)list.seg[i].start, list.seg[i].end - list.seg[i].start, name, sizeof(name));
        if (hit != NULL) {
            name_addr = (uintptr_t)hit + 1;
        }
    }
    if (name_addr == 0) {
        fprintf(stderr, "chlaunch: typeinfo name 19KillingErrorHandler not found in %s\n", lib);
        return -1;
    }
    // typeinfo: {vptr, name, base typeinfo}; vtable: {offset to top, typeinfo, slots...}.
    uintptr_t name_ref = find_word(&list, name_addr);
    uintptr_t typeinfo = name_ref != 0 ? name_ref - sizeof(uintptr_t) : 0;
    uintptr_t typeinfo_ref = typeinfo != 0 ? find_word(&list, typeinfo) : 0;
    if (typeinfo_ref == 0 || *(const uintptr_t *)(typeinfo_ref - sizeof(uintptr_t)) != 0) {
        fprintf(stderr, "chlaunch: vtable of KillingErrorHandler not found in %s\n", lib);
        return -1;
    }
    // Slots after the address point: complete dtor, deleting dtor, then the three exception() overloads.
    uintptr_t *slots = (uintptr_t *)(typeinfo_ref + sizeof(uintptr_t));
    for (int i = 0; i < 5; i++) {
        if (!in_exec_segment(&list, slots[i])) {
            fprintf(stderr, "chlaunch: KillingErrorHandler vtable slot %d does not point at code\n", i);
            return -1;
        }
    }
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t first = (uintptr_t)&slots[2] & ~(uintptr_t)(page - 1);
    uintptr_t last = ((uintptr_t)&slots[5] + page - 1) & ~(uintptr_t)(page - 1);
    if (mprotect((void *)first, last - first, PROT_READ | PROT_WRITE) != 0) {
        fprintf(stderr, "chlaunch: make the KillingErrorHandler vtable writable: %s\n", strerror(errno));
        return -1;
    }
    slots[2] = (uintptr_t)on_poco_exception;
    slots[3] = (uintptr_t)on_std_exception;
    slots[4] = (uintptr_t)on_unknown_exception;
    if (mprotect((void *)first, last - first, PROT_READ) != 0) {
        fprintf(stderr, "chlaunch: make the KillingErrorHandler vtable read-only again: %s\n", strerror(errno));
    }
    return 0;
}

static char *format_arg(const char *name, const char *value) {
    size_t n = strlen(name) + strlen(value) + 4;
    char *s = malloc(n);
    if (s == NULL) {
        fprintf(stderr, "chlaunch: out of memory\n");
        exit(2);
    }
    snprintf(s, n, "--%s=%s", name, value);
    return s;
}

int main(int argc, char **argv) {
    const char *lib = env_or("CHLAUNCH_LIB", NULL);
    const char *path = env_or("CHLAUNCH_PATH", NULL);
    const char *tcp_port = env_or("CHLAUNCH_TCP_PORT", "9000");
    const char *http_port = env_or("CHLAUNCH_HTTP_PORT", "8123");
    const char *listen_host = env_or("CHLAUNCH_LISTEN_HOST", "127.0.0.1");
    const char *log_path = env_or("CHLAUNCH_LOG", NULL);
    const char *config = env_or("CHLAUNCH_CONFIG", NULL);
    const char *log_level = env_or("CHLAUNCH_LOG_LEVEL", "information");

    static const struct option options[] = {
        {"lib", required_argument, NULL, 'l'},
        {"path", required_argument, NULL, 'p'},
        {"tcp-port", required_argument, NULL, 't'},
        {"http-port", required_argument, NULL, 'h'},
        {"listen-host", required_argument, NULL, 'H'},
        {"log", required_argument, NULL, 'o'},
        {"config", required_argument, NULL, 'c'},
        {"log-level", required_argument, NULL, 'v'},
        {"help", no_argument, NULL, '?'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case 'l': lib = optarg; break;
        case 'p': path = optarg; break;
        case 't': tcp_port = optarg; break;
        case 'h': http_port = optarg; break;
        case 'H': listen_host = optarg; break;
        case 'o': log_path = optarg; break;
        case 'c': config = optarg; break;
        case 'v': log_level = optarg; break;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "chlaunch: unexpected argument %s\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (lib == NULL || path == NULL) {
        fprintf(stderr, "chlaunch: --lib and --path are required\n");
        usage(stderr);
        return 2;
    }
    if (!valid_port(tcp_port) || !valid_port(http_port)) {
        fprintf(stderr, "chlaunch: ports must be integers in 1..65535 (tcp %s, http %s)\n", tcp_port, http_port);
        return 2;
    }
    if (config != NULL && access(config, R_OK) != 0) {
        fprintf(stderr, "chlaunch: config %s: %s\n", config, strerror(errno));
        return 2;
    }
    if (log_path != NULL && redirect_output(log_path) != 0) {
        return 2;
    }

    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGHUP);
    int rc = pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    if (rc != 0) {
        fprintf(stderr, "chlaunch: block signals: %s\n", strerror(rc));
        return 2;
    }
    pthread_t waiter;
    rc = pthread_create(&waiter, NULL, signal_waiter, &stop_signals);
    if (rc != 0) {
        fprintf(stderr, "chlaunch: start signal thread: %s\n", strerror(rc));
        return 2;
    }

    void *handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        fprintf(stderr, "chlaunch: load %s: %s\n", lib, dlerror());
        return 2;
    }
    query_cmdline_fn query_cmdline = (query_cmdline_fn)dlsym(handle, "chdb_query_cmdline");
    result_error_fn result_error = (result_error_fn)dlsym(handle, "chdb_result_error");
    if (query_cmdline == NULL || result_error == NULL) {
        fprintf(stderr, "chlaunch: %s lacks chdb_query_cmdline or chdb_result_error\n", lib);
        return 2;
    }
    if (disarm_killing_error_handler(lib) == 0) {
        fprintf(stderr, "chlaunch: a failed native connection is logged here and closed; it no longer ends the engine\n");
    } else {
        fprintf(stderr, "chlaunch: warning: a failed native connection (aborted handshake, unknown database, "
                        "wrong password) will end this server\n");
    }

    char *args[10];
    int nargs = 0;
    args[nargs++] = "clickhouse";
    args[nargs++] = "--multiquery";
    args[nargs++] = format_arg("path", path);
    args[nargs++] = format_arg("tcp_port", tcp_port);
    args[nargs++] = format_arg("http_port", http_port);
    args[nargs++] = format_arg("listen_host", listen_host);
    args[nargs++] = format_arg("log-level", log_level);
    if (config != NULL) {
        args[nargs++] = format_arg("config-file", config);
    }
    args[nargs++] = format_arg("query", keepalive_query);
    args[nargs] = NULL;

    fprintf(stderr, "chlaunch: pid %d serving %s on %s tcp %s http %s config %s\n", (int)getpid(), path,
            listen_host, tcp_port, http_port, config != NULL ? config : "(none)");
    fflush(stderr);

    // The keep-alive query only returns when the engine stops serving: a
    // startup failure (reported by the engine on stderr only; the result
    // carries no error for it) or a client ending the query. Either way the
    // server is gone, which callers must see as a failure.
    chdb_result *result = query_cmdline(nargs, args);
    const char *err = result != NULL ? result_error(result) : "chdb_query_cmdline returned no result";
    if (err != NULL && err[0] != '\0') {
        fprintf(stderr, "chlaunch: engine stopped with error: %s\n", err);
    } else {
        fprintf(stderr, "chlaunch: engine stopped serving (see the engine message above)\n");
    }
    fflush(stderr);
    // The engine's global state is not safe to tear down from here; leave
    // without running destructors.
    _exit(1);
}
