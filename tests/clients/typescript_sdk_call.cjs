// One tools/call by a client built on the TypeScript SDK: in the handshake era, without
// elicitation, asking for progress, through a gateway process started for this call alone.
// Prints the call's result (or error) and the progress it heard as one JSON line.
// Usage: node typescript_sdk_call.cjs TOOL ARGUMENTS_JSON COMMAND [ARG...]
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");

async function main() {
  const [tool, argumentsJson, command, ...args] = process.argv.slice(2);
  const transport = new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" });
  const client = new Client({ name: "typescript-sdk-client", version: "1.0" });
  const progress = [];
  await client.connect(transport);
  let outcome;
  try {
    const result = await client.callTool(
      { name: tool, arguments: JSON.parse(argumentsJson) },
      undefined,
      { onprogress: (note) => progress.push(note) },
    );
    outcome = { result, progress };
  } catch (error) {
    outcome = { error: String(error), progress };
  }
  await client.close();
  process.stdout.write(JSON.stringify(outcome) + "\n");
}

main().catch((error) => {
  process.stderr.write(String(error) + "\n");
  process.exit(1);
});
