package auth

import (
	"errors"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TokenClaims are the claims of a token a shared-secret issuer signs (Sign): the default claim
// names of an Issuer with a secret and a tenant claim "tenant".
type TokenClaims struct {
	// Scope is space-separated: ProducerScope, AdminScope.
	Scope string `json:"scope,omitempty"`
	// Tenant is the caller's tenant; empty is the default tenant.
	Tenant string `json:"tenant,omitempty"`
	// Stream narrows the token to one stream id or protocol path.
	Stream string `json:"rindle_stream,omitempty"`
	jwt.RegisteredClaims
}

// LocalTenantClaim is the tenant claim of the local issuer (LocalIssuer).
const LocalTenantClaim = "tenant"

// LocalIssuer is the issuer of the tokens Sign makes with secret: no iss, HS256, the tenant
// in the "tenant" claim (absent: the default tenant).
func LocalIssuer(secret []byte) Issuer {
	return Issuer{Name: "local", Secret: secret, Claims: ClaimNames{Tenant: LocalTenantClaim}, TenantOptional: true}
}

// Sign signs an HS256 token with c's claims, valid for ttl from now. c.Subject is required.
func Sign(secret []byte, c TokenClaims, ttl time.Duration) (string, error) {
	if c.Subject == "" {
		return "", errors.New("auth: a token needs a subject")
	}
	now := time.Now()
	c.IssuedAt = jwt.NewNumericDate(now)
	c.ExpiresAt = jwt.NewNumericDate(now.Add(ttl))
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
}
