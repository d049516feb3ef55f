/**
 * AWS's event-stream framing, as Bedrock's `invoke-with-response-stream` sends it: binary
 * messages with typed headers and a CRC each (encoded by Smithy's codec, the one the AWS SDKs
 * decode with). An Anthropic event travels as a `chunk` whose JSON body carries the event's JSON
 * in base64; a failure as an `exception` message named by its type.
 */

import { EventStreamCodec } from '@smithy/core/event-streams';

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const codec = new EventStreamCodec(
  (bytes) => decoder.decode(bytes),
  (text) => encoder.encode(text),
);

const header = (value: string) => ({ type: 'string' as const, value });

/** The event-stream message of one Anthropic event. */
export function chunkMessage(event: Record<string, unknown>): Uint8Array {
  const bytes = Buffer.from(JSON.stringify(event)).toString('base64');
  return codec.encode({
    headers: {
      ':event-type': header('chunk'),
      ':content-type': header('application/json'),
      ':message-type': header('event'),
    },
    body: encoder.encode(JSON.stringify({ bytes })),
  });
}

/**
 * The event-stream message of a failure mid-stream, e.g. `modelStreamErrorException`, whose body
 * is the exception's fields.
 */
export function exceptionMessage(type: string, fields: Record<string, unknown>): Uint8Array {
  return codec.encode({
    headers: {
      ':exception-type': header(type),
      ':content-type': header('application/json'),
      ':message-type': header('exception'),
    },
    body: encoder.encode(JSON.stringify(fields)),
  });
}
