import type { Cluster, Redis } from 'ioredis';

/** CRC16/XMODEM, the checksum Redis Cluster takes a key's slot from. */
const CRC16 = (() => {
  const table = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i << 8;
    for (let b = 0; b < 8; b++) c = c & 0x8000 ? (c << 1) ^ 0x1021 : c << 1;
    table[i] = c & 0xffff;
  }
  return table;
})();

/** The Cluster slot of a key: CRC16 of its `{hash tag}` when it has a non-empty one, mod 16384. */
export function keySlot(key: string): number {
  const open = key.indexOf('{');
  if (open >= 0) {
    const close = key.indexOf('}', open + 1);
    if (close > open + 1) key = key.slice(open + 1, close);
  }
  let crc = 0;
  for (const byte of Buffer.from(key)) crc = ((crc << 8) ^ CRC16[(crc >> 8) ^ byte]!) & 0xffff;
  return crc % 16384;
}

/**
 * The Cluster's connection to the master serving `key`, or undefined while none is known (its
 * master was lost and the slots not yet refreshed, or the slots not yet loaded).
 */
export function slotMaster(cluster: Cluster, key: string): Redis | undefined {
  const at = cluster.slots[keySlot(key)]?.[0];
  if (!at) return undefined;
  return cluster.nodes('master').find((n) => `${n.options.host}:${n.options.port}` === at);
}
