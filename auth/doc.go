// Package auth verifies bearer tokens and says who is calling: a Principal with its subject,
// tenant, scopes and, for a narrowed token, the one stream it may touch.
//
// A Verifier trusts one or more issuers. Each is an identity provider with its key set
// published as a JWKS (fetched, cached, refreshed on a schedule and when a token names a key id
// it does not know, so keys rotate without a restart), a static key set, or a shared secret
// (what `rindled token` signs with). Algorithms are pinned per issuer, and iss, aud, exp and nbf
// are checked with a small leeway. Which claims name the subject, the tenant and the scopes is
// set per issuer, because providers differ (sub, org_id, scope, scp, permissions).
//
// Tokens are read strictly: base64url without padding or stray bits, no duplicate member in
// the header or the claims, and no crit header (this verifier understands no extension, and
// RFC 7515 says a token whose critical extension is not understood must be refused).
//
// The verification itself is github.com/golang-jwt/jwt/v5, with keys from
// github.com/MicahParks/keyfunc/v3 over github.com/MicahParks/jwkset: the JWKS pair that
// golang-jwt's documentation points to, small, maintained, and with the refresh-on-unknown-kid
// rate limit this package needs. This package owns which issuer a token belongs to and how its
// claims map to a Principal; what a Principal may do on which route is the HTTP layer's
// (package httpapi), and tenants' ids are kept apart there.
package auth
