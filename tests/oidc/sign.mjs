// Makes ID tokens the tests need and no provider would issue: expired, for another issuer,
// unsigned, or HS256 "signed" with the provider's public key.
//
// Usage: node sign.mjs KEY_FILE MODE CLAIMS_JSON
//   MODE: rs256      signed with the provider's key (KEY_FILE, a private JWK)
//         none       alg "none", empty signature
//         hs256-pem  HS256 with the provider's public key (SPKI PEM) as the HMAC secret
//         hs256-n    HS256 with the public key's modulus bytes as the HMAC secret
// Prints the token.
import { createHmac, createPrivateKey, createPublicKey, sign } from 'node:crypto';
import { readFileSync } from 'node:fs';

const [keyFile, mode, claimsJson] = process.argv.slice(2);
const jwk = JSON.parse(readFileSync(keyFile, 'utf8'));
const b64 = (data) => Buffer.from(data).toString('base64url');
const claims = b64(claimsJson);
const hmac = (secret, header) => {
  const input = `${b64(JSON.stringify(header))}.${claims}`;
  return `${input}.${createHmac('sha256', secret).update(input).digest('base64url')}`;
};

let token;
switch (mode) {
  case 'rs256': {
    const header = { alg: 'RS256', kid: jwk.kid, typ: 'JWT' };
    const input = `${b64(JSON.stringify(header))}.${claims}`;
    const key = createPrivateKey({ key: jwk, format: 'jwk' });
    token = `${input}.${sign('sha256', Buffer.from(input), key).toString('base64url')}`;
    break;
  }
  case 'none':
    token = `${b64(JSON.stringify({ alg: 'none', typ: 'JWT' }))}.${claims}.`;
    break;
  case 'hs256-pem': {
    const pem = createPublicKey({ key: { kty: jwk.kty, n: jwk.n, e: jwk.e }, format: 'jwk' })
      .export({ type: 'spki', format: 'pem' });
    token = hmac(pem, { alg: 'HS256', kid: jwk.kid, typ: 'JWT' });
    break;
  }
  case 'hs256-n':
    token = hmac(Buffer.from(jwk.n, 'base64url'), { alg: 'HS256', kid: jwk.kid, typ: 'JWT' });
    break;
  default:
    throw new Error(`unknown mode ${mode}`);
}
process.stdout.write(token);
