// oauth2-mock-server (npm) as a separate authorization server for the sign-in tests.
//
//   node tests/servers/oauth_mock.mjs [PORT]    prints its issuer URL once it listens
//
// The mock approves every /authorize at once, accepts any client id (it has no registration
// endpoint, so a client must come pre-registered) and signs RS256 JWTs its /jwks publishes.
// Two hooks make its access tokens say what a resource server checks: `aud` is the `resource`
// the client asked for (RFC 8707), and `client_id` the client that asked; a client-credentials
// token's subject is its client.
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
// Installed by scripts/test under .test-deps, not beside this script.
const require = createRequire(path.join(here, "..", "..", ".test-deps", "package.json"));
const { OAuth2Server, Events } = await import(require.resolve("oauth2-mock-server"));
const basicAuth = require("basic-auth");

const server = new OAuth2Server();
await server.issuer.keys.generate("RS256");

server.service.on(Events.BeforeTokenSigning, (token, req) => {
  const body = req.body ?? {};
  const credentials = basicAuth.parse(req.headers.authorization ?? "");
  const clientId = credentials ? credentials.name : body.client_id;
  const isIdToken = token.payload.aud !== undefined && token.payload.aud === clientId;
  if (isIdToken) return;
  if (body.resource) token.payload.aud = body.resource;
  if (clientId) token.payload.client_id = clientId;
  if (body.grant_type === "client_credentials" && token.payload.sub === undefined) token.payload.sub = clientId;
});

await server.start(Number(process.argv[2] ?? 0), "127.0.0.1");
// The issuer names the address it listens on (the mock would say localhost).
server.issuer.url = `http://127.0.0.1:${server.address().port}`;
process.stdout.write(`${server.issuer.url}\n`);

for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, async () => {
    await server.stop();
    process.exit(0);
  });
}
