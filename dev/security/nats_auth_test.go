package security

import (
	"context"
	"github.com/servescope/servescope/internal/access/accesstest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/dev/testenv/natstest"
	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema"
)

// plainURL in a case's SERVESCOPE_NATS_URL stands for the server's nats:// URL.
const plainURL = "plain"

// natsCase is one client configuration, given as the environment a service would read.
type natsCase struct {
	name string
	env  map[string]string
	// wantErr is empty for a client that must connect and publish, else substrings of the error
	// separated by '|', one of which must appear.
	wantErr string
}

// TestNATSAuth runs a private nats-server per authentication mode and checks, for each client
// configuration read through config.NATS exactly as the services read it, that good credentials
// connect, set up and check the streams and publish an event the stream keeps, and that wrong or missing
// credentials are refused with an error naming the problem and nothing reaches the stream.
func TestNATSAuth(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secretFile := func(name, value string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(value+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	token := accesstest.RandomSecret(t, "tok-")
	password := accesstest.RandomSecret(t, "pw-")
	pki := testenv.NewTestPKI(t)
	op := testenv.NewNATSOperator(t)
	goodCreds := op.UserCreds(t, "gateway")

	modes := []struct {
		name  string
		auth  testenv.NATSAuth
		tls   bool
		cases []natsCase
	}{
		{
			name: "token",
			auth: testenv.NATSAuth{Token: token},
			cases: []natsCase{
				{"token", map[string]string{"SERVESCOPE_NATS_TOKEN": token}, ""},
				{"token file", map[string]string{"SERVESCOPE_NATS_TOKEN_FILE": secretFile("token", token)}, ""},
				{"wrong token", map[string]string{"SERVESCOPE_NATS_TOKEN": token + "x"}, "authorization violation"},
				{"missing token", map[string]string{}, "authorization violation"},
				{"missing token file", map[string]string{"SERVESCOPE_NATS_TOKEN_FILE": filepath.Join(dir, "absent")}, "SERVESCOPE_NATS_TOKEN_FILE: read secret file"},
			},
		},
		{
			name: "user and password",
			auth: testenv.NATSAuth{User: "servescope", Password: password},
			cases: []natsCase{
				{"password", map[string]string{"SERVESCOPE_NATS_USER": "servescope", "SERVESCOPE_NATS_PASSWORD": password}, ""},
				{"password file", map[string]string{"SERVESCOPE_NATS_USER": "servescope", "SERVESCOPE_NATS_PASSWORD_FILE": secretFile("password", password)}, ""},
				{"wrong password", map[string]string{"SERVESCOPE_NATS_USER": "servescope", "SERVESCOPE_NATS_PASSWORD": password + "x"}, "authorization violation"},
				{"wrong user", map[string]string{"SERVESCOPE_NATS_USER": "intruder", "SERVESCOPE_NATS_PASSWORD": password}, "authorization violation"},
				{"missing password", map[string]string{"SERVESCOPE_NATS_USER": "servescope"}, "authorization violation"},
				{"no credentials", map[string]string{}, "authorization violation"},
			},
		},
		{
			name: "creds file",
			auth: testenv.NATSAuth{Operator: op},
			cases: []natsCase{
				{"creds", map[string]string{"SERVESCOPE_NATS_CREDS_FILE": goodCreds}, ""},
				{"creds of an unknown account", map[string]string{"SERVESCOPE_NATS_CREDS_FILE": testenv.ForeignCreds(t, "intruder")}, "authorization violation"},
				{"missing creds", map[string]string{}, "authorization violation"},
				{"creds file absent", map[string]string{"SERVESCOPE_NATS_CREDS_FILE": filepath.Join(dir, "absent.creds")}, "absent.creds"},
			},
		},
		{
			name: "mutual TLS",
			auth: testenv.NATSAuth{Token: token, PKI: pki, VerifyClients: true},
			tls:  true,
			cases: []natsCase{
				{"CA and client certificate", map[string]string{"SERVESCOPE_NATS_TOKEN": token, "SERVESCOPE_NATS_TLS": "true",
					"SERVESCOPE_NATS_TLS_CA": pki.CAFile, "SERVESCOPE_NATS_TLS_CERT": pki.ClientCert, "SERVESCOPE_NATS_TLS_KEY": pki.ClientKey}, ""},
				{"server signed by an unknown CA", map[string]string{"SERVESCOPE_NATS_TOKEN": token, "SERVESCOPE_NATS_TLS": "true",
					"SERVESCOPE_NATS_TLS_CA": pki.OtherCAFile, "SERVESCOPE_NATS_TLS_CERT": pki.ClientCert, "SERVESCOPE_NATS_TLS_KEY": pki.ClientKey}, "certificate signed by unknown authority"},
				// Under TLS 1.3 the server's "certificate required" alert arrives after the handshake, so
				// the client sees either that alert or "connection closed by remote after TLS handshake".
				{"no client certificate", map[string]string{"SERVESCOPE_NATS_TOKEN": token, "SERVESCOPE_NATS_TLS": "true",
					"SERVESCOPE_NATS_TLS_CA": pki.CAFile}, "certificate required|connection closed by remote after TLS handshake"},
				// A nats:// URL without SERVESCOPE_NATS_TLS: nats.go upgrades to TLS because the server
				// requires it, and without the CA it cannot verify the server.
				{"TLS off", map[string]string{"SERVESCOPE_NATS_TOKEN": token, "SERVESCOPE_NATS_URL": plainURL}, "tls error"},
				{"good certificate, wrong token", map[string]string{"SERVESCOPE_NATS_TOKEN": token + "x", "SERVESCOPE_NATS_TLS": "true",
					"SERVESCOPE_NATS_TLS_CA": pki.CAFile, "SERVESCOPE_NATS_TLS_CERT": pki.ClientCert, "SERVESCOPE_NATS_TLS_KEY": pki.ClientKey}, "authorization violation"},
			},
		},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			srv := natstest.StartAuth(t, m.auth)
			url := srv.URL()
			if m.tls {
				url = srv.TLSURL()
			}
			prefix := testenv.UniqueName("sec")
			published := 0
			var good map[string]string
			for _, tc := range m.cases {
				env := map[string]string{"SERVESCOPE_NATS_URL": url, "SERVESCOPE_SUBJECT_PREFIX": prefix}
				for k, v := range tc.env {
					env[k] = v
				}
				if env["SERVESCOPE_NATS_URL"] == plainURL {
					env["SERVESCOPE_NATS_URL"] = srv.URL()
				}
				err := connectAndPublish(t, env)
				if tc.wantErr == "" {
					if err != nil {
						t.Fatalf("%s: %v", tc.name, err)
					}
					published++
					good = env
					continue
				}
				if err == nil {
					t.Fatalf("%s: connected and published, want a refusal", tc.name)
				}
				msg := err.Error()
				t.Logf("%s: refused: %s", tc.name, msg)
				found := false
				for _, want := range strings.Split(tc.wantErr, "|") {
					found = found || strings.Contains(strings.ToLower(msg), strings.ToLower(want))
				}
				if !found {
					t.Errorf("%s: error %q does not contain %q", tc.name, msg, tc.wantErr)
				}
				for _, secret := range []string{token, password} {
					if strings.Contains(msg, secret) {
						t.Errorf("%s: error shows a secret: %q", tc.name, msg)
					}
				}
			}
			if good == nil {
				t.Fatal("no good client configuration in this mode")
			}
			if n := streamMsgs(t, good); n != uint64(published) {
				t.Fatalf("stream holds %d messages, want the %d published with good credentials", n, published)
			}
		})
	}
}

// connectAndPublish does what the setup step and then a service do at start: read the settings,
// connect, set up the streams and check them, then publish one event and wait for its
// acknowledgement.
func connectAndPublish(t *testing.T, env map[string]string) error {
	t.Helper()
	cfg, err := config.LoadFrom[config.NATS](env)
	if err != nil {
		return err
	}
	nc, err := cfg.Connect("security-test", nats.Timeout(5*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// Generous: on a loaded machine a timeout here would read as a refused credential.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topo := cfg.Topology()
	// The setup step, as `servescope migrate up` runs it, then the check a publisher makes at
	// start (schema/publish with Config.Kinds).
	if _, err := bus.Setup(ctx, js, topo, cfg.StreamSettings()); err != nil {
		return err
	}
	if _, err := bus.CheckStream(ctx, js, topo, []schema.Kind{schema.KindAppRecord}, jetstream.StreamConfig{}); err != nil {
		return err
	}
	rec := schema.NewAppRecord(testenv.UniqueName("req"), "security-test", time.Now())
	data, err := schema.Encode(rec)
	if err != nil {
		t.Fatalf("encode event: %v", err)
	}
	_, err = js.Publish(ctx, topo.Subject(rec.Kind()), data)
	return err
}

// streamMsgs returns how many messages the events stream holds, read with good credentials.
func streamMsgs(t *testing.T, env map[string]string) uint64 {
	t.Helper()
	cfg, err := config.LoadFrom[config.NATS](env)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := cfg.Connect("security-test-check")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, cfg.Topology().Stream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// setUpStreams runs the setup step for the services given env, as `servescope migrate up` given
// the same environment would: the streams of env's prefix, with the durable consumer of each
// consumer environment in consumers (its CONSUMER_* settings).
func setUpStreams(t *testing.T, env map[string]string, consumers ...map[string]string) {
	t.Helper()
	cfg, err := config.LoadFrom[config.NATS](env)
	if err != nil {
		t.Fatal(err)
	}
	var ds []bus.Durable
	for _, c := range consumers {
		cc, err := config.LoadFrom[config.Consumer](c)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, cc.DurableConsumer())
	}
	nc, err := cfg.Connect("security-test-setup", nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect to NATS for the setup: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Provision(t, js, cfg, ds...)
}
