// A real OpenID provider (node-oidc-provider, pinned in package.json) for the
// tests: testkit/src/oidc.rs starts it, reads the one JSON line it prints once
// listening, and talks to it over stdin/stdout (one JSON command a line, one
// JSON answer a line). It stops when stdin closes, so a test never leaks it.
//
//   node provider.mjs [--port N] [--path /realms/lmos] [--keys state.json]
//
// Access tokens are JWTs for the requested resource (RFC 8707, `aud` = the
// resource). The signing algorithm is chosen by the client: the static
// confidential clients `lmos-rs256`, `lmos-es256`, `lmos-eddsa` (and
// `lmos-short`, RS256 with 1 s tokens for the expiry tests) get tokens by
// client_credentials; dynamically registered clients (the MCP SDKs) get RS256
// by authorization_code + PKCE, through interactions that complete by
// themselves as `alice`, granting what was asked, without cookies (an SDK
// following the redirects with plain GETs keeps none).
//
// Commands on stdin:
//   {"cmd":"rotate"}  new RSA, EC and Ed25519 signing keys put first (they
//                     sign from now on), the old ones kept in the JWKS; the
//                     provider is rebuilt in place: same port, same issuer.
//   {"cmd":"token","client":C,"resource":R,"scope":S}  the token endpoint's
//                     answer to client C's client_credentials request.
//   {"cmd":"forge","kind":K,"aud":A,"scope":S,"sub":U}  a token this provider
//                     would never issue, otherwise valid (iss, aud, exp, sub,
//                     scope): K = "none" (alg none), "hs256-public" (HS256
//                     keyed with the provider's RSA public key as PEM: alg
//                     confusion), "unknown-kid" (RS256 by a fresh key under a
//                     kid never published).
import { createServer } from 'node:http';
import { createPublicKey, createHmac } from 'node:crypto';
import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import * as jose from 'jose';
import Provider from 'oidc-provider';

// stdout carries the protocol only: the provider's notices go to stderr.
console.log = console.error;
console.info = console.error;

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, arg, i, all) => {
    if (arg.startsWith('--')) pairs.push([arg.slice(2), all[i + 1]]);
    return pairs;
  }, []),
);
const mountPath = (args.path ?? '').replace(/\/$/, '');
const keysFile = args.keys;

const SCOPES = ['lmos:consume', 'lmos:operate', 'lmos:host', 'lmos:admin', 'mcp:tools', 'a2a:send'];
const ALG_OF_CLIENT = {
  'lmos-rs256': 'RS256', 'lmos-es256': 'ES256', 'lmos-eddsa': 'EdDSA', 'lmos-short': 'RS256',
};
const SECRET = 'lmos-test-secret';

async function signingKeys() {
  const keys = [];
  for (const [alg, options] of [['RS256', {}], ['ES256', {}], ['EdDSA', { crv: 'Ed25519' }]]) {
    const { privateKey } = await jose.generateKeyPair(alg, { extractable: true, ...options });
    const jwk = await jose.exportJWK(privateKey);
    jwk.kid = await jose.calculateJwkThumbprint(jwk);
    keys.push({ ...jwk, alg, use: 'sig' });
  }
  return keys;
}

async function loadKeys() {
  if (keysFile && existsSync(keysFile)) return JSON.parse(readFileSync(keysFile, 'utf8')).keys;
  const keys = await signingKeys();
  if (keysFile) writeFileSync(keysFile, JSON.stringify({ keys }));
  return keys;
}

function resourceServer(client, resource) {
  const alg = ALG_OF_CLIENT[client.clientId] ?? 'RS256';
  return {
    scope: SCOPES.join(' '),
    audience: resource,
    accessTokenTTL: client.clientId === 'lmos-short' ? 1 : 600,
    accessTokenFormat: 'jwt',
    jwt: { sign: { alg } },
  };
}

// Login as alice and consent to everything asked, in one step: the grant
// carries the requested OIDC scopes and the requested resource's scopes.
async function completeInteraction(provider, uid, res) {
  const interaction = await provider.Interaction.find(uid);
  if (!interaction) {
    res.writeHead(400).end('unknown interaction');
    return;
  }
  const { params } = interaction;
  const grant = interaction.grantId
    ? await provider.Grant.find(interaction.grantId)
    : new provider.Grant({ accountId: 'alice', clientId: params.client_id });
  const requested = (params.scope ?? '').split(' ').filter(Boolean);
  // The provider counts every scope it knows as an OIDC scope too.
  grant.addOIDCScope(requested.filter((s) => ['openid', 'offline_access', ...SCOPES].includes(s)).join(' '));
  const resources = [params.resource ?? []].flat();
  for (const resource of resources) {
    grant.addResourceScope(resource, requested.filter((s) => SCOPES.includes(s)).join(' '));
  }
  const grantId = await grant.save();
  interaction.result = { login: { accountId: 'alice' }, consent: { grantId } };
  await interaction.save(interaction.exp - Math.floor(Date.now() / 1000));
  res.writeHead(303, { location: interaction.returnTo }).end();
}

function build(issuer, keys) {
  const provider = new Provider(issuer, {
    jwks: { keys },
    clients: Object.keys(ALG_OF_CLIENT).map((client_id) => ({
      client_id,
      client_secret: SECRET,
      grant_types: ['client_credentials'],
      response_types: [],
      redirect_uris: [],
      token_endpoint_auth_method: 'client_secret_post',
    })),
    scopes: ['openid', 'offline_access', ...SCOPES],
    claims: { openid: ['sub'] },
    findAccount: (_ctx, accountId) => ({ accountId, claims: () => ({ sub: accountId }) }),
    pkce: { required: () => true },
    interactions: { url: (_ctx, interaction) => `${mountPath}/interaction/${interaction.uid}` },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      registration: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: (_ctx, _client, oneOf) => oneOf,
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, resource, client) => resourceServer(client, resource),
      },
    },
    enabledJWA: {
      // EdDSA is not in the default list.
      idTokenSigningAlgValues: ['RS256', 'ES256', 'EdDSA'],
    },
    ttl: {
      AccessToken: (_ctx, token) => token.resourceServer?.accessTokenTTL ?? 600,
      ClientCredentials: (_ctx, token) => token.resourceServer?.accessTokenTTL ?? 600,
    },
  });
  provider.on('server_error', (_ctx, err) => process.stderr.write(`oidc: ${err.stack}\n`));
  return provider;
}

// The path-inserted (RFC 8414 §3.1) and the appended forms of both metadata
// documents all answer with the provider's OIDC discovery document.
function rewrite(url) {
  const wellKnown = ['/.well-known/oauth-authorization-server', '/.well-known/openid-configuration'];
  for (const doc of wellKnown) {
    if (url === `${doc}${mountPath}` || url === `${mountPath}${doc}`) return '/.well-known/openid-configuration';
  }
  if (mountPath && url.startsWith(`${mountPath}/`)) return url.slice(mountPath.length);
  return mountPath ? null : url;
}

// The resume step checks a cookie naming the interaction; the uid is in the
// path already, so a client that keeps no cookies gets it put back.
function withResumeCookie(req, url) {
  const resume = /^\/auth\/([\w-]+)/.exec(url);
  if (resume && !(req.headers.cookie ?? '').includes('_interaction_resume=')) {
    req.headers.cookie = [req.headers.cookie, `_interaction_resume=${resume[1]}`].filter(Boolean).join('; ');
  }
}

async function forge(state, { kind, aud, scope, sub = 'mallory' }) {
  const now = Math.floor(Date.now() / 1000);
  const claims = { iss: state.issuer, aud, scope, sub, iat: now, exp: now + 600, jti: `forged-${now}` };
  const b64 = (value) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const rsa = state.keys.find((k) => k.kty === 'RSA');
  if (kind === 'none') return `${b64({ alg: 'none', typ: 'at+jwt' })}.${b64(claims)}.`;
  if (kind === 'hs256-public') {
    const pem = createPublicKey({ key: { kty: 'RSA', n: rsa.n, e: rsa.e }, format: 'jwk' })
      .export({ type: 'spki', format: 'pem' });
    const input = `${b64({ alg: 'HS256', typ: 'at+jwt', kid: rsa.kid })}.${b64(claims)}`;
    return `${input}.${createHmac('sha256', pem).update(input).digest('base64url')}`;
  }
  if (kind === 'unknown-kid') {
    const { privateKey } = await jose.generateKeyPair('RS256');
    return new jose.SignJWT(claims)
      .setProtectedHeader({ alg: 'RS256', typ: 'at+jwt', kid: 'never-published' })
      .sign(privateKey);
  }
  throw new Error(`unknown forge kind ${kind}`);
}

// A real token from the token endpoint, as a confidential client would ask.
async function clientCredentials(state, { client, resource, scope }) {
  const response = await fetch(`${state.issuer}/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({
      grant_type: 'client_credentials', client_id: client, client_secret: SECRET, resource, scope,
    }),
  });
  return response.json();
}

async function main() {
  const state = { keys: await loadKeys(), provider: null, issuer: null };
  const server = createServer((req, res) => {
    const url = rewrite(req.url);
    if (url === null) {
      res.writeHead(404).end();
      return;
    }
    const interaction = /^\/interaction\/([\w-]+)$/.exec(url.split('?')[0]);
    if (interaction && req.method === 'GET') {
      completeInteraction(state.provider, interaction[1], res).catch((err) => {
              res.writeHead(500).end();
      });
      return;
    }
    withResumeCookie(req, url);
    // As a mount does: the provider finds its path in the difference.
    req.originalUrl = `${mountPath}${url}`;
    req.url = url;
    state.callback(req, res);
  });
  await new Promise((resolve) => { server.listen(Number(args.port ?? 0), '127.0.0.1', resolve); });
  const { port } = server.address();
  state.issuer = `http://127.0.0.1:${port}${mountPath}`;
  const install = () => {
    state.provider = build(state.issuer, state.keys);
    state.callback = state.provider.callback();
  };
  install();
  const kids = () => Object.fromEntries(state.keys.map((k) => [k.alg, k.kid]).reverse());
  const say = (value) => process.stdout.write(`${JSON.stringify(value)}\n`);
  say({
    issuer: state.issuer,
    port,
    discovery: `${state.issuer}/.well-known/openid-configuration`,
    jwks_uri: `${state.issuer}/jwks`,
    token_endpoint: `${state.issuer}/token`,
    authorization_endpoint: `${state.issuer}/auth`,
    registration_endpoint: `${state.issuer}/reg`,
    clients: Object.fromEntries(Object.entries(ALG_OF_CLIENT).map(([id]) => [id, SECRET])),
    kids: kids(),
  });

  const commands = createInterface({ input: process.stdin });
  commands.on('line', async (line) => {
    try {
      const command = JSON.parse(line);
      if (command.cmd === 'rotate') {
        state.keys = [...(await signingKeys()), ...state.keys];
        if (keysFile) writeFileSync(keysFile, JSON.stringify({ keys: state.keys }));
        install();
        say({ rotated: true, kids: kids() });
      } else if (command.cmd === 'token') {
        say(await clientCredentials(state, command));
      } else if (command.cmd === 'forge') {
        say({ token: await forge(state, command) });
      } else {
        say({ error: `unknown command ${command.cmd}` });
      }
    } catch (err) {
      say({ error: String(err) });
    }
  });
  commands.on('close', () => process.exit(0));
}

main().catch((err) => {
  process.stderr.write(`oidc: ${err.stack}\n`);
  process.exit(1);
});
