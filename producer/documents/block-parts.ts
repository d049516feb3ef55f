import {
  type ContentBlock,
  guessInput,
  type PlanContext,
  type PlannedPart,
} from './document-plan.ts';
import { DocumentRefusedError } from './document-refused.ts';
import { MOST_REQUEST_BYTES } from './request-bounds.ts';

/** Bytes of a request kept for what is not the blocks (the prompt, the JSON around). */
const REQUEST_MARGIN_BYTES = 64 * 1024;

/**
 * A document of content blocks (images, text, documents) as calls: all of them in one when they
 * fit, else runs of consecutive blocks, each as many as fit a call's room (each block costed
 * as the gate will reserve it: an image by its pixels) and a request's 32 MB. A block that alone
 * fits no call is refused, naming it.
 */
export function blockParts(blocks: readonly ContentBlock[], ctx: PlanContext): PlannedPart[] {
  if (blocks.length === 0) throw new DocumentRefusedError('holds no content block');
  const whole = ctx.request(blocks);
  if (guessInput(whole, ctx) <= ctx.room && bytesOf(blocks) <= MOST_REQUEST_BYTES)
    return [{ content: blocks }];
  // What the request costs besides its blocks: the prompt and the message around them.
  const beside = guessInput(ctx.request([]), ctx);
  const parts: PlannedPart[] = [];
  let run: ContentBlock[] = [];
  let tokens = beside;
  let bytes = REQUEST_MARGIN_BYTES;
  blocks.forEach((block, i) => {
    const cost = guessInput(ctx.request([block]), ctx) - beside;
    const size = bytesOf([block]);
    if (beside + cost > ctx.room || REQUEST_MARGIN_BYTES + size > MOST_REQUEST_BYTES)
      throw new DocumentRefusedError(blockTooLarge(i, beside + cost, size, ctx.room));
    if (run.length > 0 && (tokens + cost > ctx.room || bytes + size > MOST_REQUEST_BYTES)) {
      parts.push({ content: run });
      run = [];
      tokens = beside;
      bytes = REQUEST_MARGIN_BYTES;
    }
    run.push(block);
    tokens += cost;
    bytes += size;
  });
  parts.push({ content: run });
  return parts;
}

const bytesOf = (blocks: readonly ContentBlock[]): number =>
  Buffer.byteLength(JSON.stringify(blocks));

function blockTooLarge(index: number, tokens: number, bytes: number, room: number): string {
  const which = `block ${index + 1}`;
  if (bytes + REQUEST_MARGIN_BYTES > MOST_REQUEST_BYTES)
    return `${which} alone is ${(bytes / 1024 / 1024).toFixed(1)} MB, more than one request holds (32 MB)`;
  return `${which} alone needs ${tokens} input tokens with the prompt, more than one call may hold under the limits (${Math.floor(room)}): raise the input limit to at least ${tokens}`;
}
