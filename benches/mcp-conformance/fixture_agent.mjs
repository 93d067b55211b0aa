// The MCP conformance suite's fixture tools and resources, served by an
// ordinary LMOS agent: it connects to the sidecar's WebSocket gateway as
// the host of one Thing (`?host=`, subprotocol `lmosprotocol`), registers
// the Thing's description on the same socket, and answers the sidecar's
// readProperty / observeProperty / invokeAction as any agent would. The
// sidecar makes MCP tools and resources of it (actions, readable
// properties); what the suite's scenarios expect follows from the TD and
// the answers alone: media outputs from `contentEncoding` and
// `contentMediaType`, several content blocks from an output's `content`
// list, log notifications from `running` statuses, resource URIs from
// `lmos:uri` (docs/agent-protocols.md, "MCP content and resources").
//
// usage: node fixture_agent.mjs ws://127.0.0.1:PORT/lmos
// Prints "fixture agent ready" once its description is registered.

import WebSocket from 'ws';

const THING = 'urn:lmos:mcp-conformance-fixture';
// A 1x1 red PNG and a tiny WAV (44-byte header, one silent sample).
const PNG =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
const WAV = 'UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQIAAAAAAA==';
const form = (name) => [{ href: `https://fixture.example/${name}` }];
const media = (type) => ({ type: 'string', contentEncoding: 'base64', contentMediaType: type });

const action = (name, description, extra = {}) => [
  name,
  { description, forms: form(name), ...extra }
];

const TD = {
  '@context': ['https://www.w3.org/2022/wot/td/v1.1', { lmos: 'https://eclipse.dev/lmos/protocol/v1' }],
  '@type': 'lmos:Agent',
  id: THING,
  title: 'ConformanceFixture',
  securityDefinitions: { nosec_sc: { scheme: 'nosec' } },
  security: 'nosec_sc',
  actions: Object.fromEntries([
    action('test_simple_text', 'Answers a simple text.'),
    action('test_image_content', 'Answers a PNG image.', { output: media('image/png') }),
    action('test_audio_content', 'Answers a WAV sound.', { output: media('audio/wav') }),
    action('test_embedded_resource', 'Answers an embedded text resource.'),
    action('test_multiple_content_types', 'Answers text, an image and a resource.'),
    action('test_tool_with_logging', 'Tells three steps as it goes.'),
    action('test_tool_with_progress', 'Reports its progress three times.'),
    action('test_error_handling', 'Always fails.'),
    action('json_schema_2020_12_tool', 'Tool with JSON Schema 2020-12 features', {
      input: {
        $schema: 'https://json-schema.org/draft/2020-12/schema',
        type: 'object',
        $defs: {
          address: {
            type: 'object',
            properties: { street: { type: 'string' }, city: { type: 'string' } }
          }
        },
        properties: { name: { type: 'string' }, address: { $ref: '#/$defs/address' } },
        additionalProperties: false
      }
    })
  ]),
  properties: {
    static_text: {
      description: 'A static text resource.',
      type: 'string',
      contentMediaType: 'text/plain',
      readOnly: true,
      'lmos:uri': 'test://static-text',
      forms: form('static_text')
    },
    static_binary: {
      description: 'A static binary resource (a PNG).',
      ...media('image/png'),
      readOnly: true,
      'lmos:uri': 'test://static-binary',
      forms: form('static_binary')
    },
    template_data: {
      description: 'Data for an ID.',
      type: 'object',
      readOnly: true,
      uriVariables: { id: { type: 'string', enum: ['123', '456', '789'] } },
      'lmos:uri': 'test://template/{id}/data',
      forms: form('template_data')
    },
    watched_resource: {
      description: 'A resource that changes now and then.',
      type: 'string',
      readOnly: true,
      observable: true,
      'lmos:uri': 'test://watched-resource',
      forms: form('watched_resource')
    }
  }
};

const sidecar = process.argv[2];
if (!sidecar) {
  console.error('usage: node fixture_agent.mjs ws://HOST:PORT/lmos');
  process.exit(2);
}
const socket = new WebSocket(`${sidecar}?host=${encodeURIComponent(THING)}`, 'lmosprotocol');
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
let watched = 'initial value';

function send(type, correlation, members) {
  const m = { thingID: THING, messageID: crypto.randomUUID(), messageType: type, ...members };
  if (correlation) m.correlationID = correlation;
  socket.send(JSON.stringify(m));
}

const reading = (name, value, correlation) =>
  send('propertyReading', correlation, { name, value, timestamp: new Date().toISOString() });

function read(m, c) {
  const values = {
    static_text: 'This is the content of the static text resource.',
    static_binary: PNG,
    watched_resource: watched
  };
  if (m.name === 'template_data') {
    const id = String(m.uriVariables?.id ?? '');
    return reading(m.name, { id, templateTest: true, data: `Data for ID: ${id}` }, c);
  }
  if (m.name in values) return reading(m.name, values[m.name], c);
  send('error', c, {
    type: 'https://eclipse.dev/lmos/protocol/v1/errors#not-found',
    title: 'Unknown property',
    status: '404',
    detail: `No property ${m.name}.`,
    instance: `urn:uuid:${crypto.randomUUID()}`
  });
}

const OUTPUTS = {
  test_simple_text: 'This is a simple text response for testing.',
  test_image_content: PNG,
  test_audio_content: WAV,
  json_schema_2020_12_tool: 'Received.',
  test_embedded_resource: {
    content: [
      {
        type: 'resource',
        resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' }
      }
    ]
  },
  test_multiple_content_types: {
    content: [
      { type: 'text', text: 'Multiple content types test:' },
      { type: 'image', data: PNG, mimeType: 'image/png' },
      {
        type: 'resource',
        resource: { uri: 'test://mixed-content-resource', mimeType: 'application/json', text: '{"test":"data","value":123}' }
      }
    ]
  }
};

const STEPS = {
  test_tool_with_logging: ['Tool execution started', 'Tool processing data', 'Tool execution completed'],
  test_tool_with_progress: ['0/100', '50/100', '100/100']
};

async function invoke(m, c) {
  const status = (s, output) =>
    send('actionStatus', c, output === undefined ? { action: m.action, status: s } : { action: m.action, status: s, output });
  status('pending');
  if (m.action === 'test_error_handling') {
    return status('failed', { error: 'This tool intentionally returns an error for testing' });
  }
  for (const step of STEPS[m.action] ?? []) {
    status('running', { progress: step });
    await sleep(50);
  }
  status('completed', OUTPUTS[m.action] ?? `${m.action} done.`);
}

socket.on('open', () => {
  socket.send(JSON.stringify(TD));
  reading('watched_resource', watched);
  console.log('fixture agent ready');
});
socket.on('message', (data) => {
  let m;
  try {
    m = JSON.parse(data.toString());
  } catch {
    return;
  }
  const c = m.correlationID ?? m.correlationId;
  switch (m.messageType) {
    case 'readProperty':
      return read(m, c);
    case 'invokeAction':
      return void invoke(m, c);
    case 'error':
      return console.error(`the sidecar refused something: ${m.detail}`);
    default:
      return undefined;
  }
});
// The watched resource changes every second: subscribers hear of it.
setInterval(() => {
  if (socket.readyState !== WebSocket.OPEN) return;
  watched = `changed at ${new Date().toISOString()}`;
  reading('watched_resource', watched);
}, 1000);
socket.on('close', () => process.exit(0));
socket.on('error', (e) => {
  console.error(`fixture agent: ${e.message}`);
  process.exit(1);
});
