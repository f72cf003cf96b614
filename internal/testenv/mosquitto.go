package testenv

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// MosquittoPath is the broker binary the helper runs.
var MosquittoPath = "/usr/sbin/mosquitto"

// MosquittoOptions tunes the broker a test starts. The zero value is an
// anonymous broker without persistence (a restart loses retained messages,
// which is what a crashed broker without a persistence file does).
type MosquittoOptions struct {
	// Username and Password, when set, require that login (mosquitto_passwd
	// writes the password file); anonymous clients are then refused.
	Username, Password string
	// Persistence keeps retained messages across Restart.
	Persistence bool
	// Nagle leaves mosquitto's default TCP settings (Nagle's algorithm on,
	// as Home Assistant's Mosquitto add-on runs it) instead of the tests'
	// set_tcp_nodelay; benchmarks of request latency use it.
	Nagle bool
	// TLS adds a second listener with a certificate for 127.0.0.1 signed by
	// a throw-away CA (TLSURL, RootCAs).
	TLS bool
}

// Mosquitto is a real mosquitto broker on a free loopback port, with its own
// configuration in t.TempDir(). It is stopped when the test ends.
type Mosquitto struct {
	// Port is the loopback TCP port; it stays the same across Restart.
	Port int
	// URL is tcp://127.0.0.1:<port>.
	URL string
	// Dir holds mosquitto.conf, the password file, the certificates and the log.
	Dir string
	// TLSURL is ssl://127.0.0.1:<tls port> when MosquittoOptions.TLS is set.
	TLSURL string
	// RootCAs trusts the TLS listener's certificate.
	RootCAs *x509.CertPool

	t    testing.TB
	conf string
	log  *syncBuffer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartMosquitto starts a broker for t on a free loopback port. It skips the
// test when the binary is missing.
func StartMosquitto(t testing.TB, opts ...MosquittoOptions) *Mosquitto {
	t.Helper()
	var o MosquittoOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	if _, err := os.Stat(MosquittoPath); err != nil {
		missing(t, "mosquitto not available (make test installs it): "+err.Error())
	}
	dir := t.TempDir()
	port, err := freePort()
	if err != nil {
		t.Fatalf("testenv: free port: %v", err)
	}
	conf := fmt.Sprintf("listener %d 127.0.0.1\n", port)
	// Run as whoever runs the test: as root, mosquitto would otherwise drop
	// to the "mosquitto" user, which cannot read files in t.TempDir().
	if u, err := user.Current(); err == nil {
		conf += "user " + u.Username + "\n"
	}
	if o.Username != "" {
		pw := filepath.Join(dir, "passwd")
		if err := os.WriteFile(pw, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("mosquitto_passwd", "-b", pw, o.Username, o.Password).CombinedOutput()
		if err != nil {
			t.Fatalf("testenv: mosquitto_passwd: %v: %s", err, out)
		}
		conf += "allow_anonymous false\npassword_file " + pw + "\n"
	} else {
		conf += "allow_anonymous true\n"
	}
	if o.Persistence {
		conf += "persistence true\npersistence_location " + dir + "/\nautosave_interval 1\n"
	} else {
		conf += "persistence false\n"
	}
	var tlsURL string
	var roots *x509.CertPool
	if o.TLS {
		tport, err := freePort()
		if err != nil {
			t.Fatalf("testenv: free port: %v", err)
		}
		cert, key, pool, err := writeCerts(dir)
		if err != nil {
			t.Fatalf("testenv: certificates: %v", err)
		}
		roots = pool
		tlsURL = "ssl://127.0.0.1:" + strconv.Itoa(tport)
		conf += fmt.Sprintf("listener %d 127.0.0.1\ncertfile %s\nkeyfile %s\n", tport, cert, key)
	}
	// Without it mosquitto's small writes wait for the peer's delayed ACK
	// (Nagle): about 40 ms per request/response round trip.
	if !o.Nagle {
		conf += "set_tcp_nodelay true\n"
	}
	conf += "log_dest stderr\nlog_type error\nlog_type warning\nlog_type notice\n"
	confPath := filepath.Join(dir, "mosquitto.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	m := &Mosquitto{
		Port:    port,
		URL:     "tcp://127.0.0.1:" + strconv.Itoa(port),
		Dir:     dir,
		TLSURL:  tlsURL,
		RootCAs: roots,
		t:       t,
		conf:    confPath,
		log:     &syncBuffer{},
	}
	if err := m.start(); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(m.Stop)
	return m
}

func (m *Mosquitto) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		return fmt.Errorf("mosquitto already running")
	}
	var lastErr error
	// The port may still be held briefly after a stop; retry a few times.
	for attempt := 0; attempt < 20; attempt++ {
		cmd := exec.Command(MosquittoPath, "-c", m.conf)
		cmd.Stdout = m.log
		cmd.Stderr = m.log
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start mosquitto: %w", err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-done:
				lastErr = fmt.Errorf("mosquitto exited: %s", m.log.String())
				goto retry
			default:
			}
			if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(m.Port), 200*time.Millisecond); err == nil {
				_ = c.Close()
				m.cmd, m.done = cmd, done
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("mosquitto did not listen on %d: %s", m.Port, m.log.String())
	retry:
		time.Sleep(100 * time.Millisecond)
	}
	return lastErr
}

// Stop terminates the broker (SIGTERM, then SIGKILL after 5 s). Stopping a
// stopped broker does nothing.
func (m *Mosquitto) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(5 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
	m.cmd, m.done = nil, nil
}

// Restart stops the broker if it runs and starts it again on the same port
// with the same configuration.
func (m *Mosquitto) Restart() {
	m.t.Helper()
	m.Stop()
	if err := m.start(); err != nil {
		m.t.Fatalf("testenv: restart: %v", err)
	}
}

// Log returns what the broker logged so far.
func (m *Mosquitto) Log() string {
	return m.log.String()
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// writeCerts writes a CA-signed server certificate for 127.0.0.1 (and the
// CA as ca.crt).
func writeCerts(dir string) (certPath, keyPath string, roots *x509.CertPool, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "testenv CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", "", nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", "", nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", "", nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", nil, err
	}
	certPath, keyPath = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", "", nil, err
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", nil, err
	}
	// The CA too, for clients that take a file (PostgreSQL's sslrootcert).
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		return "", "", nil, err
	}
	roots = x509.NewCertPool()
	roots.AddCert(ca)
	return certPath, keyPath, roots, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
