package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// NATSAuth describes how a private nats-server started by [StartNATSAuth] authenticates clients.
// Set one of Token, User+Password or Operator; PKI adds TLS on the client port (with
// VerifyClients, mutual TLS: clients must present a certificate signed by PKI's CA).
type NATSAuth struct {
	Token         string
	User          string
	Password      string
	Operator      *NATSOperator
	PKI           *TestPKI
	VerifyClients bool
}

// StartNATSAuth starts a private nats-server like [StartNATS], with JetStream and a store under
// t.TempDir(), configured by a generated config file to require the given authentication. It
// returns once /healthz?js-enabled-only=true answers 200 on the (plain HTTP) monitoring port.
func StartNATSAuth(t testing.TB, auth NATSAuth) *NATSServer {
	t.Helper()
	root := procRepoRootOrFatal(t)
	bin := filepath.Join(root, ".cache", "bin", "nats-server")
	procRequireFile(t, bin)
	dir := t.TempDir()
	s := &NATSServer{
		port:        procFreePort(t),
		monitorPort: procFreePort(t),
		storeDir:    filepath.Join(dir, "jetstream"),
	}
	conf := filepath.Join(dir, "nats-server.conf")
	if err := os.WriteFile(conf, []byte(natsAuthConfig(s, auth)), 0o600); err != nil {
		t.Fatalf("write nats-server config: %v", err)
	}
	s.proc = &serverProcess{
		t:       t,
		name:    "nats-server",
		path:    bin,
		args:    []string{"-c", conf},
		logPath: filepath.Join(dir, "nats-server.log"),
		ready: func(ctx context.Context) error {
			_, err := procHTTPGet(ctx, fmt.Sprintf("http://127.0.0.1:%d/healthz?js-enabled-only=true", s.monitorPort))
			return err
		},
	}
	t.Cleanup(s.proc.cleanup)
	s.proc.start()
	return s
}

// TLSURL is the client URL with the tls:// scheme, for servers started with a PKI.
func (s *NATSServer) TLSURL() string { return fmt.Sprintf("tls://127.0.0.1:%d", s.port) }

func natsAuthConfig(s *NATSServer, auth NATSAuth) string {
	q := strconv.Quote
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %s\n", q("127.0.0.1:"+strconv.Itoa(s.port)))
	fmt.Fprintf(&b, "http: %s\n", q("127.0.0.1:"+strconv.Itoa(s.monitorPort)))
	fmt.Fprintf(&b, "server_name: %s\n", q("testenv-auth-"+strconv.Itoa(s.port)))
	fmt.Fprintf(&b, "jetstream { store_dir: %s }\n", q(s.storeDir))
	switch {
	case auth.Token != "":
		fmt.Fprintf(&b, "authorization { token: %s }\n", q(auth.Token))
	case auth.User != "":
		fmt.Fprintf(&b, "authorization { user: %s, password: %s }\n", q(auth.User), q(auth.Password))
	}
	if o := auth.Operator; o != nil {
		fmt.Fprintf(&b, "operator: %s\n", q(o.OperatorJWT))
		fmt.Fprintf(&b, "system_account: %s\n", q(o.SystemAccount))
		b.WriteString("resolver: MEMORY\n")
		fmt.Fprintf(&b, "resolver_preload: { %s: %s, %s: %s }\n",
			o.SystemAccount, q(o.systemAccountJWT), o.Account, q(o.accountJWT))
	}
	if p := auth.PKI; p != nil {
		fmt.Fprintf(&b, "tls { cert_file: %s, key_file: %s, ca_file: %s, verify: %t, timeout: 5 }\n",
			q(p.ServerCert), q(p.ServerKey), q(p.CAFile), auth.VerifyClients)
	}
	return b.String()
}

// NATSOperator is a throw-away NATS operator (decentralised JWT auth) with a system account and one
// JetStream-enabled account, Account, whose users [NATSOperator.UserCreds] creates.
type NATSOperator struct {
	OperatorJWT   string
	SystemAccount string // public key
	Account       string // public key

	systemAccountJWT string
	accountJWT       string
	accountKey       nkeys.KeyPair
}

// NewNATSOperator generates the operator, the system account and the application account.
func NewNATSOperator(t testing.TB) *NATSOperator {
	t.Helper()
	opKey := natsKey(t, nkeys.CreateOperator)
	opPub := natsPublic(t, opKey)
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "servescope-test"
	o := &NATSOperator{}
	sysKey := natsKey(t, nkeys.CreateAccount)
	o.SystemAccount = natsPublic(t, sysKey)
	oc.SystemAccount = o.SystemAccount
	var err error
	if o.OperatorJWT, err = oc.Encode(opKey); err != nil {
		t.Fatalf("sign operator JWT: %v", err)
	}
	sc := jwt.NewAccountClaims(o.SystemAccount)
	sc.Name = "SYS"
	if o.systemAccountJWT, err = sc.Encode(opKey); err != nil {
		t.Fatalf("sign system account JWT: %v", err)
	}
	o.accountKey = natsKey(t, nkeys.CreateAccount)
	o.Account = natsPublic(t, o.accountKey)
	ac := jwt.NewAccountClaims(o.Account)
	ac.Name = "SERVESCOPE"
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	if o.accountJWT, err = ac.Encode(opKey); err != nil {
		t.Fatalf("sign account JWT: %v", err)
	}
	return o
}

// UserCreds writes a .creds file (user JWT signed by the account, plus the user's nkey seed) for a
// new user of the application account and returns its path.
func (o *NATSOperator) UserCreds(t testing.TB, name string) string {
	t.Helper()
	return natsWriteCreds(t, o.accountKey, name)
}

// ForeignCreds writes a well-formed .creds file for a user of an account the server does not know
// (signed by a key outside the operator), and returns its path: the server must refuse it.
func ForeignCreds(t testing.TB, name string) string {
	t.Helper()
	return natsWriteCreds(t, natsKey(t, nkeys.CreateAccount), name)
}

func natsWriteCreds(t testing.TB, accountKey nkeys.KeyPair, name string) string {
	t.Helper()
	userKey := natsKey(t, nkeys.CreateUser)
	uc := jwt.NewUserClaims(natsPublic(t, userKey))
	uc.Name = name
	userJWT, err := uc.Encode(accountKey)
	if err != nil {
		t.Fatalf("sign user JWT %s: %v", name, err)
	}
	seed, err := userKey.Seed()
	if err != nil {
		t.Fatalf("user seed %s: %v", name, err)
	}
	creds, err := jwt.FormatUserConfig(userJWT, seed)
	if err != nil {
		t.Fatalf("format creds %s: %v", name, err)
	}
	path := filepath.Join(t.TempDir(), name+".creds")
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	return path
}

func natsKey(t testing.TB, create func() (nkeys.KeyPair, error)) nkeys.KeyPair {
	t.Helper()
	kp, err := create()
	if err != nil {
		t.Fatalf("create nkey: %v", err)
	}
	return kp
}

func natsPublic(t testing.TB, kp nkeys.KeyPair) string {
	t.Helper()
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatalf("nkey public key: %v", err)
	}
	return pub
}
