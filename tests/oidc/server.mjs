// A real OpenID Connect provider (panva/oidc-provider, a certified
// implementation) for tiphys's loopback end-to-end tests.
//
// Environment:
//   OIDC_PORT           port on 127.0.0.1 (required)
//   OIDC_KEY_FILE       the signing key as a private JWK; created when missing, reused when
//                       present (the tests rotate keys by starting with a new file)
//   OIDC_REDIRECT_URIS  comma-separated redirect URIs of every client
//   OIDC_TLS_CERT, OIDC_TLS_KEY   serve https with this PEM certificate and key
//   OIDC_ID_TOKEN_TTL   ID token lifetime in seconds (default 3600)
//   OIDC_DEVICE_CODE_TTL  device code lifetime in seconds (default 600)
//   OIDC_DEVICE_FLOW    `off`: no device authorization grant (nor its discovery entry)
//
// Clients: `argo-cd` (confidential, secret `argo-cd-secret`), `argo-cd-cli` (public, PKCE
// required; it may also use the device authorization grant) and `other-app` (confidential, secret `other-secret`: a token issued to another
// application of the same provider). Any login and password are accepted; consent is granted
// automatically. Claims: sub=<login>, email=<login>@example.test, name, preferred_username,
// groups: ["devs"], plus "admins" for logins starting with "admin", plus 400 more groups for
// logins starting with "many"; the user-info endpoint (/me) adds "from-userinfo".
import { createPrivateKey, generateKeyPairSync, randomUUID } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import Provider from 'oidc-provider';

const port = Number(process.env.OIDC_PORT);
if (!port) throw new Error('OIDC_PORT is required');
const tls = process.env.OIDC_TLS_CERT && process.env.OIDC_TLS_KEY;
const issuer = `${tls ? 'https' : 'http'}://127.0.0.1:${port}`;
const redirectUris = (process.env.OIDC_REDIRECT_URIS || 'http://127.0.0.1:8080/auth/callback').split(',');
const keyFile = process.env.OIDC_KEY_FILE;

function signingKey() {
  if (keyFile && existsSync(keyFile)) return JSON.parse(readFileSync(keyFile, 'utf8'));
  // PEM out of the generator, then a new key object for the JWK. Node 20 can deadlock when a GC
  // during the JWK export of a freshly generated key object runs the generator job's destructor,
  // which waits for the lock the export holds (seen about once in 200 starts on a busy machine).
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048,
    publicKeyEncoding: { type: 'spki', format: 'pem' }, privateKeyEncoding: { type: 'pkcs8', format: 'pem' } });
  const jwk = { ...createPrivateKey(privateKey).export({ format: 'jwk' }), kid: randomUUID(), use: 'sig', alg: 'RS256' };
  if (keyFile) writeFileSync(keyFile, JSON.stringify(jwk), { mode: 0o600 });
  return jwk;
}

const groupsFor = (login) => {
  const groups = ['devs'];
  if (login.startsWith('admin')) groups.push('admins');
  if (login.startsWith('many')) for (let i = 0; i < 400; i += 1) groups.push(`team-with-a-long-name-${i}`);
  return groups;
};
const origins = [...new Set(redirectUris.map((u) => `${new URL(u).origin}/`))];

const provider = new Provider(issuer, {
  clients: [
    { client_id: 'argo-cd', client_secret: 'argo-cd-secret', redirect_uris: redirectUris,
      post_logout_redirect_uris: origins, response_types: ['code'],
      grant_types: ['authorization_code', 'refresh_token'], token_endpoint_auth_method: 'client_secret_basic' },
    { client_id: 'argo-cd-cli', redirect_uris: redirectUris, response_types: ['code'],
      grant_types: ['authorization_code', 'refresh_token',
        ...(process.env.OIDC_DEVICE_FLOW === 'off' ? [] : ['urn:ietf:params:oauth:grant-type:device_code'])],
      token_endpoint_auth_method: 'none' },
    { client_id: 'other-app', client_secret: 'other-secret', redirect_uris: redirectUris, response_types: ['code'],
      grant_types: ['authorization_code'], token_endpoint_auth_method: 'client_secret_basic' },
  ],
  jwks: { keys: [signingKey()] },
  cookies: { keys: ['test-cookie-key-not-secret'] },
  scopes: ['openid', 'offline_access', 'profile', 'email', 'groups'],
  claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name', 'preferred_username'], groups: ['groups'] },
  conformIdTokenClaims: false, // scope claims (groups, email) go into the ID token too
  features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true },
    deviceFlow: { enabled: process.env.OIDC_DEVICE_FLOW !== 'off' } },
  pkce: { required: (ctx, client) => client.clientAuthMethod === 'none' },
  // Refresh tokens for the public CLI client, as Dex gives them for offline_access (this library
  // would otherwise want prompt=consent before it grants offline_access).
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token')
    && client.clientAuthMethod === 'none',
  ttl: { AccessToken: 3600, IdToken: Number(process.env.OIDC_ID_TOKEN_TTL || 3600), AuthorizationCode: 600,
    Interaction: 3600, Session: 86400, Grant: 86400, RefreshToken: 86400,
    DeviceCode: Number(process.env.OIDC_DEVICE_CODE_TTL || 600) },
  async findAccount(ctx, sub) {
    return { accountId: sub, async claims(use) {
      // The user-info endpoint knows one group more than the ID token (as GitLab or Okta can).
      const groups = use === 'userinfo' ? [...groupsFor(sub), 'from-userinfo'] : groupsFor(sub);
      return { sub, email: `${sub}@example.test`, email_verified: true, name: `Test ${sub}`,
        preferred_username: sub, groups };
    } };
  },
  async loadExistingGrant(ctx) { // no consent screen for these first-party clients
    const id = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (id) { const g = await ctx.oidc.provider.Grant.find(id); if (g) return g; }
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope(ctx.oidc.requestParamScopes ? [...ctx.oidc.requestParamScopes].join(' ') : 'openid');
    grant.addOIDCClaims(['sub', 'email', 'email_verified', 'name', 'preferred_username', 'groups']);
    await grant.save();
    return grant;
  },
});

const ready = () => console.log(`oidc-provider issuer ${issuer}`);
if (tls) {
  const options = { cert: readFileSync(process.env.OIDC_TLS_CERT), key: readFileSync(process.env.OIDC_TLS_KEY) };
  https.createServer(options, provider.callback()).listen(port, '127.0.0.1', ready);
} else {
  provider.listen(port, '127.0.0.1', ready);
}
