// initialize -> run_consensus -> poll get_status -> get_result with the official TypeScript SDK.
// Usage: node roundtrip.mjs stdio <command> <models-json>
//        node roundtrip.mjs http <url> <models-json>   (token from MASSGEN_MCP_TOKEN)
// Prints one JSON object: {serverVersion, statusPolls, result}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [mode, target, modelsJson] = process.argv.slice(2);
const transport = mode === "stdio"
  ? new StdioClientTransport({ command: target, args: [], env: process.env, stderr: "ignore" })
  : new StreamableHTTPClientTransport(new URL(target), {
      requestInit: { headers: { Authorization: `Bearer ${process.env.MASSGEN_MCP_TOKEN}` } },
    });
const client = new Client({ name: "ts-sdk-roundtrip", version: "1.0.0" });
await client.connect(transport);

const started = await client.callTool({
  name: "run_consensus",
  arguments: { question: "What is 6*7?", models: JSON.parse(modelsJson) },
});
if (started.isError) throw new Error(JSON.stringify(started.content));
const sessionId = started.structuredContent.session_id;
let polls = 0;
for (;;) {
  polls += 1;
  const status = await client.callTool({ name: "get_status", arguments: { session_id: sessionId, wait_s: 10 } });
  if (status.structuredContent.done) break;
  if (polls > 100) throw new Error("run did not finish");
}
const result = await client.callTool({ name: "get_result", arguments: { session_id: sessionId } });
console.log(JSON.stringify({
  serverVersion: client.getServerVersion(),
  statusPolls: polls,
  result: result.structuredContent,
}));
await client.close();
