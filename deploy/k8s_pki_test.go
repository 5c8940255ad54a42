//go:build k8s

package deploy_test

import (
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
	"path/filepath"
	"time"
)

// pki writes the certificates and keys of a one-node cluster into dir:
// one CA for the cluster, one for the front proxy, EC P-256 throughout
// (RSA-2048 would take seconds), valid for two days.
type pki struct {
	dir                 string
	caCert              *x509.Certificate
	caKey               *ecdsa.PrivateKey
	proxyCert           *x509.Certificate
	proxyKey            *ecdsa.PrivateKey
	serial              int64
	notBefore, notAfter time.Time
}

func newPKI(dir string) (*pki, error) {
	p := &pki{dir: dir, notBefore: time.Now().Add(-time.Hour), notAfter: time.Now().Add(48 * time.Hour)}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var err error
	if p.caCert, p.caKey, err = p.ca("ca", "nri-handover-test-ca"); err != nil {
		return nil, err
	}
	if p.proxyCert, p.proxyKey, err = p.ca("front-proxy-ca", "nri-handover-test-front-proxy-ca"); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

func (p *pki) nextSerial() *big.Int {
	p.serial++
	return big.NewInt(p.serial)
}

func (p *pki) ca(name, cn string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: p.nextSerial(), Subject: pkix.Name{CommonName: cn},
		NotBefore: p.notBefore, NotAfter: p.notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create CA %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, p.write(name, der, key)
}

// leaf issues a certificate signed by the cluster CA (or, with proxy, by
// the front-proxy CA) and writes <name>.crt and <name>.key.
func (p *pki) leaf(name, cn string, orgs []string, server, proxy bool, dns []string, ips []net.IP) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if server {
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	tmpl := &x509.Certificate{
		SerialNumber: p.nextSerial(), Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: p.notBefore, NotAfter: p.notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: usage, DNSNames: dns, IPAddresses: ips,
	}
	parent, parentKey := p.caCert, p.caKey
	if proxy {
		parent, parentKey = p.proxyCert, p.proxyKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return fmt.Errorf("create certificate %s: %w", name, err)
	}
	return p.write(name, der, key)
}

func (p *pki) write(name string, der []byte, key *ecdsa.PrivateKey) error {
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.path(name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(p.path(name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600)
}

// serviceAccountKey writes the key pair the API server signs service
// account tokens with (sa.key) and verifies them with (sa.pub).
func (p *pki) serviceAccountKey() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.path("sa.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(p.path("sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

// kubeconfig writes a kubeconfig for the client certificate <name>.
func (p *pki) kubeconfig(name, server string) (string, error) {
	path := p.path(name + ".kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: local
  context: {cluster: local, user: %s}
current-context: local
`, server, p.path("ca.crt"), name, p.path(name+".crt"), p.path(name+".key"), name)
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}
