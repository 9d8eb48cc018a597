// One tools/call the way the MCP Inspector's CLI makes it: a TypeScript SDK client named
// "inspector-cli", in the handshake era, without elicitation, through a gateway process started
// for this call alone. Prints the call's result (or error) and the progress it heard as one JSON
// line. Usage: node inspector_like.cjs TOOL ARGUMENTS_JSON COMMAND [ARG...]
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");

async function main() {
  const [tool, argumentsJson, command, ...args] = process.argv.slice(2);
  const transport = new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" });
  const client = new Client({ name: "inspector-cli", version: "0.17.0" });
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
