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
//
// Every flag has an environment fallback read when the flag is absent:
// CHLAUNCH_LIB, CHLAUNCH_PATH, CHLAUNCH_TCP_PORT, CHLAUNCH_HTTP_PORT,
// CHLAUNCH_LISTEN_HOST, CHLAUNCH_LOG.
//
// Exit status: 0 after SIGTERM, SIGINT or SIGHUP; 1 when the engine stopped
// serving on its own, which is either a failed start (the engine writes its
// message, e.g. "Code: 210 ... Address already in use" or "Code: 76 ...
// Cannot lock file", to stderr) or a client ending the keep-alive query
// (KILL QUERY, SYSTEM SHUTDOWN); 2 on bad usage or when libchdb cannot be
// loaded.
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
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
            "                [--listen-host HOST] [--log FILE]\n"
            "env fallbacks: CHLAUNCH_LIB CHLAUNCH_PATH CHLAUNCH_TCP_PORT CHLAUNCH_HTTP_PORT\n"
            "               CHLAUNCH_LISTEN_HOST CHLAUNCH_LOG\n");
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

    static const struct option options[] = {
        {"lib", required_argument, NULL, 'l'},
        {"path", required_argument, NULL, 'p'},
        {"tcp-port", required_argument, NULL, 't'},
        {"http-port", required_argument, NULL, 'h'},
        {"listen-host", required_argument, NULL, 'H'},
        {"log", required_argument, NULL, 'o'},
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

    char *args[] = {
        "clickhouse",
        "--multiquery",
        format_arg("path", path),
        format_arg("tcp_port", tcp_port),
        format_arg("http_port", http_port),
        format_arg("listen_host", listen_host),
        format_arg("query", keepalive_query),
        NULL,
    };
    int nargs = (int)(sizeof(args) / sizeof(args[0])) - 1;

    fprintf(stderr, "chlaunch: pid %d serving %s on %s tcp %s http %s\n", (int)getpid(), path, listen_host,
            tcp_port, http_port);
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
