import { expect, it } from 'vitest';
import { ApiKeyStore, hashApiKey } from '../producer/http/api-keys.ts';

const hex = hashApiKey('sk-a');

it('a keys-file entry may carry the default priority of its gateway calls', () => {
  const store = ApiKeyStore.parse(`acme:${hex}:batch\nbeta:${hashApiKey('sk-b')}`);
  expect(store.entryOf('sk-a')).toMatchObject({ tenant: 'acme', priority: 'batch' });
  expect(store.entryOf('sk-b')).toMatchObject({ tenant: 'beta', priority: undefined });
  expect(store.authenticate('Bearer sk-a')).toBe('acme');
  expect(store.entryOf('sk-c')).toBeUndefined();
});

it('a bad priority in the keys file names the entry and the value', () => {
  expect(() => ApiKeyStore.parse(`acme:${hex}:urgent`)).toThrow(
    /LLMQ_API_KEYS entry 1 \(acme\): priority must be .*"urgent"/,
  );
  expect(() => ApiKeyStore.parse(`acme:${hex}:batch:more`)).toThrow(
    /entry 1 must be tenant:sha256hex\[:priority\]/,
  );
});
