// Package authtest is an identity provider for tests: a JWKS served over HTTP on loopback, keys
// that rotate, and tokens signed with them. It owns nothing a production path uses.
package authtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// Provider serves a JWKS at URL()/jwks.json and signs tokens with its current key.
type Provider struct {
	// Issuer is the iss its tokens carry.
	Issuer string
	alg    string
	srv    *httptest.Server

	mu      sync.Mutex
	keys    []key // served; the last signs
	failing bool
	fetches atomic.Int64
	n       int
}

type key struct {
	kid  string
	priv crypto.Signer
}

// New starts a provider whose keys sign with alg (RS256, ES256 or EdDSA).
func New(alg string) *Provider {
	p := &Provider{alg: alg}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	p.Issuer = p.srv.URL + "/"
	p.Rotate(false)
	return p
}

// Close stops the server.
func (p *Provider) Close() { p.srv.Close() }

// JWKSURL is where the key set is served.
func (p *Provider) JWKSURL() string { return p.srv.URL + "/jwks.json" }

// Fetches counts the key set's fetches (successful or not).
func (p *Provider) Fetches() int64 { return p.fetches.Load() }

// Fail makes fetches answer 500 (true) or serve the keys again (false).
func (p *Provider) Fail(failing bool) {
	p.mu.Lock()
	p.failing = failing
	p.mu.Unlock()
}

// Rotate adds a new signing key; with retire, the older keys leave the set.
func (p *Provider) Rotate(retire bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	k := key{kid: fmt.Sprintf("key-%d", p.n), priv: newKey(p.alg)}
	if retire {
		p.keys = nil
	}
	p.keys = append(p.keys, k)
}

func newKey(alg string) crypto.Signer {
	var (
		k   crypto.Signer
		err error
	)
	switch alg {
	case "RS256":
		k, err = rsa.GenerateKey(rand.Reader, 2048)
	case "ES256":
		k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "EdDSA":
		_, k, err = ed25519.GenerateKey(rand.Reader)
	default:
		panic("authtest: no key for " + alg)
	}
	if err != nil {
		panic(err)
	}
	return k
}

func (p *Provider) serve(w http.ResponseWriter, _ *http.Request) {
	p.fetches.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failing {
		http.Error(w, "the provider is down", http.StatusInternalServerError)
		return
	}
	var set jwkset.JWKSMarshal
	for _, k := range p.keys {
		jwk, err := jwkset.NewJWKFromKey(k.priv.Public(), jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{
			KID: k.kid, ALG: jwkset.ALG(p.alg), USE: jwkset.UseSig}})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		set.Keys = append(set.Keys, jwk.Marshal())
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(set)
}

// Sign signs claims with the current key, filling iss (unless set) and exp (an hour, unless
// set).
func (p *Provider) Sign(claims jwt.MapClaims) string {
	p.mu.Lock()
	k := p.keys[len(p.keys)-1]
	p.mu.Unlock()
	c := jwt.MapClaims{"iss": p.Issuer, "exp": time.Now().Add(time.Hour).Unix()}
	for name, v := range claims {
		c[name] = v
	}
	t := jwt.NewWithClaims(jwt.GetSigningMethod(p.alg), c)
	t.Header["kid"] = k.kid
	s, err := t.SignedString(k.priv)
	if err != nil {
		panic(err)
	}
	return s
}
