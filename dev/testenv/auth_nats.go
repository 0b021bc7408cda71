package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// NATSAuth describes how a NATS server authenticates clients: set one of Token, User+Password or
// Operator; PKI adds TLS on the client port (with VerifyClients, mutual TLS: clients must present a
// certificate signed by PKI's CA). natstest.StartAuth runs a server with it.
type NATSAuth struct {
	Token         string
	User          string
	Password      string
	Operator      *NATSOperator
	PKI           *TestPKI
	VerifyClients bool
}

// Config is the nats-server configuration that requires a's authentication: the authorization,
// operator and tls blocks of a config file, without listen addresses or JetStream settings.
func (auth NATSAuth) Config() string {
	q := strconv.Quote
	var b strings.Builder
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
