// A scripted model server for the four harnesses' wire protocols, streaming
// as each harness asks: Anthropic Messages (Claude Code), OpenAI Responses
// (Codex), Chat Completions (OpenCode) and Gemini (Gemini CLI).
//
// The script is a list of shell commands. A request that offers the shell
// tool and carries fewer tool results than the script has commands gets one
// call of that tool with the next command; any other request that offers
// the shell tool gets a final text quoting every tool result; a request that
// offers no shell tool (titles, summaries) gets a short text. So the model is
// stateless: what to answer follows from the request alone. Every request is
// appended to the log as one JSON line, `{method, url, body}`, and every tool
// call made as `{issued: id}` (Gemini's calls carry no id): the tool results
// a harness sends back are what its commands saw.

import { appendFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { randomBytes } from 'node:crypto';

/** The names the harnesses give their shell tool. */
const SHELL_TOOLS = new Set(['Bash', 'bash', 'shell', 'shell_command', 'exec_command', 'run_shell_command']);

/** The text of the final answer, quoting what the commands printed. */
export const FINAL_PREFIX = 'The commands printed:\n';

const id = (prefix) => `${prefix}${randomBytes(8).toString('hex')}`;

/**
 * Arguments for a shell tool with this JSON schema, running `command`: the
 * command where the schema wants it (a string, or argv for `bash -lc`), and
 * every other required string a placeholder (OpenCode wants a description).
 */
export function shellArguments(schema, command) {
  const properties = schema?.properties ?? {};
  const args = {};
  for (const name of schema?.required ?? []) {
    const type = properties[name]?.type;
    if (type === 'string' || (Array.isArray(type) && type.includes('string'))) args[name] = 'a scripted call';
  }
  const key = ['command', 'cmd'].find((k) => k in properties) ?? 'command';
  args[key] = properties[key]?.type === 'array' ? ['bash', '-lc', command] : command;
  return args;
}

/** The text of a tool result in any of the shapes the harnesses send. */
function text(content) {
  if (content == null) return '';
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map(text).join('');
  if (typeof content.text === 'string') return content.text;
  if ('output' in content) return text(content.output);
  if ('content' in content) return text(content.content);
  return JSON.stringify(content);
}

/**
 * Each protocol: where its shell tool's schema is, and what tool results a
 * request carries. `tool` returns `{name, schema}` or undefined.
 */
const PROTOCOLS = {
  anthropic: {
    tool: (body) => (body.tools ?? []).filter((t) => SHELL_TOOLS.has(t.name)).map((t) => ({ name: t.name, schema: t.input_schema }))[0],
    results: (body) =>
      (body.messages ?? []).flatMap((m) => (Array.isArray(m.content) ? m.content : []))
        .filter((c) => c.type === 'tool_result')
        .map((c) => text(c.content)),
  },
  responses: {
    tool: (body) => (body.tools ?? []).filter((t) => t.type === 'function' && SHELL_TOOLS.has(t.name)).map((t) => ({ name: t.name, schema: t.parameters }))[0],
    results: (body) =>
      (Array.isArray(body.input) ? body.input : [])
        .filter((i) => i.type === 'function_call_output' || i.type === 'custom_tool_call_output')
        .map((i) => text(i.output)),
  },
  chat: {
    tool: (body) => (body.tools ?? []).filter((t) => SHELL_TOOLS.has(t.function?.name)).map((t) => ({ name: t.function.name, schema: t.function.parameters }))[0],
    results: (body) => (body.messages ?? []).filter((m) => m.role === 'tool').map((m) => text(m.content)),
  },
  gemini: {
    tool: (body) =>
      (body.tools ?? []).flatMap((t) => t.functionDeclarations ?? [])
        .filter((f) => SHELL_TOOLS.has(f.name))
        .map((f) => ({ name: f.name, schema: f.parametersJsonSchema ?? lowerGeminiSchema(f.parameters) }))[0],
    results: (body) =>
      (body.contents ?? []).flatMap((c) => c.parts ?? [])
        .filter((p) => p.functionResponse)
        .map((p) => text(p.functionResponse.response)),
  },
};

/** Gemini's `parameters` schema spells types in capitals (`STRING`). */
function lowerGeminiSchema(schema) {
  if (!schema) return schema;
  const properties = Object.fromEntries(
    Object.entries(schema.properties ?? {}).map(([k, v]) => [k, { ...v, type: String(v.type).toLowerCase() }]),
  );
  return { ...schema, properties };
}

/**
 * The smallest value of a JSON schema (either case of type names): a side
 * request that asks for JSON (Gemini CLI's model router) gets JSON it can
 * parse, not retries.
 */
export function sampleOf(schema) {
  if (schema?.enum) return schema.enum[0];
  switch (String(schema?.type).toLowerCase()) {
    case 'object':
      return Object.fromEntries((schema.required ?? []).map((k) => [k, sampleOf(schema.properties?.[k])]));
    case 'array': return [];
    case 'integer': case 'number': return 1;
    case 'boolean': return false;
    default: return 'ok';
  }
}

/**
 * What the model answers: `{call: {name, args}}` or `{text}`.
 */
export function decide(protocol, body, commands) {
  const tool = PROTOCOLS[protocol].tool(body);
  const wanted = body.generationConfig?.responseJsonSchema ?? body.generationConfig?.responseSchema;
  if (!tool && wanted) return { text: JSON.stringify(sampleOf(wanted)) };
  if (!tool) return { text: 'ok' };
  const results = PROTOCOLS[protocol].results(body);
  if (results.length < commands.length) {
    return { call: { name: tool.name, args: shellArguments(tool.schema, commands[results.length]) } };
  }
  return { text: FINAL_PREFIX + results.join('\n---\n') };
}

/** Writes server-sent events: `[event, data]` pairs, `event` null for a bare `data:`. */
function sse(res, events) {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  for (const [event, data] of events) {
    if (event) res.write(`event: ${event}\n`);
    res.write(`data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`);
  }
  res.end();
}

function json(res, status, value) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(value));
}

function anthropic(res, body, answer) {
  const usage = { input_tokens: 1, output_tokens: 1, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 };
  const block = answer.call
    ? { type: 'tool_use', id: answer.call.id, name: answer.call.name, input: answer.call.args }
    : { type: 'text', text: answer.text };
  const message = {
    id: id('msg_'), type: 'message', role: 'assistant', model: body.model ?? 'scripted',
    content: [block], stop_reason: answer.call ? 'tool_use' : 'end_turn', stop_sequence: null, usage,
  };
  if (!body.stream) return json(res, 200, message);
  const start = answer.call ? { ...block, input: {} } : { type: 'text', text: '' };
  const delta = answer.call
    ? { type: 'input_json_delta', partial_json: JSON.stringify(answer.call.args) }
    : { type: 'text_delta', text: answer.text };
  sse(res, [
    ['message_start', { type: 'message_start', message: { ...message, content: [], stop_reason: null } }],
    ['content_block_start', { type: 'content_block_start', index: 0, content_block: start }],
    ['content_block_delta', { type: 'content_block_delta', index: 0, delta }],
    ['content_block_stop', { type: 'content_block_stop', index: 0 }],
    ['message_delta', { type: 'message_delta', delta: { stop_reason: message.stop_reason, stop_sequence: null }, usage: { output_tokens: 1 } }],
    ['message_stop', { type: 'message_stop' }],
  ]);
}

function responses(res, body, answer) {
  const item = answer.call
    ? { type: 'function_call', id: id('fc_'), call_id: answer.call.id, name: answer.call.name, arguments: JSON.stringify(answer.call.args), status: 'completed' }
    : { type: 'message', id: id('msg_'), role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: answer.text, annotations: [] }] };
  const usage = { input_tokens: 1, input_tokens_details: { cached_tokens: 0 }, output_tokens: 1, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 2 };
  const response = { id: id('resp_'), object: 'response', created_at: 0, status: 'completed', model: body.model ?? 'scripted', output: [item], usage };
  sse(res, [
    ['response.created', { type: 'response.created', response: { ...response, status: 'in_progress', output: [] } }],
    ['response.output_item.added', { type: 'response.output_item.added', output_index: 0, item }],
    ['response.output_item.done', { type: 'response.output_item.done', output_index: 0, item }],
    ['response.completed', { type: 'response.completed', response }],
  ]);
}

function chat(res, body, answer) {
  const chunk = (delta, finish) => ({
    id: 'chatcmpl-scripted', object: 'chat.completion.chunk', created: 0, model: body.model ?? 'scripted',
    choices: [{ index: 0, delta, finish_reason: finish }],
  });
  const delta = answer.call
    ? { role: 'assistant', tool_calls: [{ index: 0, id: answer.call.id, type: 'function', function: { name: answer.call.name, arguments: JSON.stringify(answer.call.args) } }] }
    : { role: 'assistant', content: answer.text };
  if (!body.stream) {
    const message = answer.call ? { role: 'assistant', content: null, tool_calls: delta.tool_calls.map(({ index, ...c }) => c) } : delta;
    return json(res, 200, { id: 'chatcmpl-scripted', object: 'chat.completion', created: 0, model: body.model ?? 'scripted', choices: [{ index: 0, message, finish_reason: answer.call ? 'tool_calls' : 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
  }
  sse(res, [
    [null, chunk(delta, null)],
    [null, { ...chunk({}, answer.call ? 'tool_calls' : 'stop'), usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }],
    [null, '[DONE]'],
  ]);
}

function gemini(res, body, answer, stream) {
  const part = answer.call ? { functionCall: { name: answer.call.name, args: answer.call.args } } : { text: answer.text };
  const reply = {
    candidates: [{ content: { role: 'model', parts: [part] }, finishReason: 'STOP', index: 0 }],
    usageMetadata: { promptTokenCount: 1, candidatesTokenCount: 1, totalTokenCount: 2 },
    modelVersion: 'scripted',
  };
  if (!stream) return json(res, 200, reply);
  sse(res, [[null, reply]]);
}

/**
 * An HTTP server that plays the scripted model: `commands` is the list of
 * shell commands to call in turn, `log` the file every request is appended to.
 */
export function createModelServer({ commands, log }) {
  return createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      let body = {};
      try {
        body = raw ? JSON.parse(raw) : {};
      } catch {
        body = { unparsed: raw };
      }
      if (log) appendFileSync(log, JSON.stringify({ method: req.method, url: req.url, body }) + '\n');
      const path = new URL(req.url, 'http://model').pathname;
      const answer = (protocol) => {
        const decided = decide(protocol, body, commands);
        if (decided.call && protocol !== 'gemini') {
          decided.call.id = id(protocol === 'anthropic' ? 'toolu_' : 'call_');
          if (log) appendFileSync(log, JSON.stringify({ issued: decided.call.id }) + '\n');
        }
        return decided;
      };
      if (req.method === 'HEAD' || req.method === 'GET') {
        res.writeHead(200, { 'content-type': 'application/json' });
        return res.end(req.method === 'GET' ? '{}' : undefined);
      }
      if (path.endsWith('/messages')) return anthropic(res, body, answer('anthropic'));
      if (path.endsWith('/responses')) return responses(res, body, answer('responses'));
      if (path.endsWith('/chat/completions')) return chat(res, body, answer('chat'));
      if (path.endsWith(':streamGenerateContent')) return gemini(res, body, answer('gemini'), true);
      if (path.endsWith(':generateContent')) return gemini(res, body, answer('gemini'), false);
      if (path.endsWith(':countTokens')) return json(res, 200, { totalTokens: 1 });
      json(res, 404, { error: { message: `the scripted model does not serve ${req.method} ${path}` } });
    });
  });
}

/**
 * What a harness sent back from its tool calls, in order: the tool results
 * of the logged request that carries the most, and the ids of the calls the
 * model made (none for Gemini).
 */
export function readLog(text) {
  const lines = text.split('\n').filter(Boolean).map((line) => JSON.parse(line));
  const issued = lines.filter((l) => l.issued).map((l) => l.issued);
  let results = [];
  for (const { body } of lines.filter((l) => l.body)) {
    for (const protocol of Object.values(PROTOCOLS)) {
      const found = protocol.results(body);
      if (found.length > results.length) results = found;
    }
  }
  return { issued, results, requests: lines.filter((l) => l.body) };
}
