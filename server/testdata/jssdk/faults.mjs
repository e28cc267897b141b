// Drives a Tabula server that injects failures (serve --faults) with the
// official JS SDK and its default retry policy, in a workload designed to
// be idempotent: a retried insert that meets 409 EntityAlreadyExists, a
// conditional update that meets 412, a delete that meets 404, each reads
// the entity to see whether its own earlier attempt was applied (an
// OperationTimedOut after the commit is such an attempt).
//
// server/faults_test.go runs it with TABULA_CONNECTION_STRING and
// TABULA_TABLE (a table that exists), and compares the store with the
// acknowledged history this script prints as its last line of output:
// {"<PartitionKey>": {"<RowKey>": {"nonce", "v", "etag"}}}, plus the
// number of ambiguous answers it settled by reading.
import { TableClient } from "@azure/data-tables";
import { randomBytes } from "node:crypto";

const conn = process.env.TABULA_CONNECTION_STRING;
const tableName = process.env.TABULA_TABLE;
if (!conn || !tableName) {
  console.error("set TABULA_CONNECTION_STRING and TABULA_TABLE");
  process.exit(2);
}
const table = TableClient.fromConnectionString(conn, tableName, { allowInsecureConnection: true });
const nonce = () => randomBytes(8).toString("hex");
let settled = 0;

async function read(pk, rk) {
  try {
    const e = await table.getEntity(pk, rk);
    return { nonce: e.Nonce, v: e.V, etag: e.etag };
  } catch (e) {
    if (e.statusCode === 404) return null;
    throw e;
  }
}

// settle checks an ambiguous write was applied: the entity holds want
// (or, want null, is gone); it records the ETag the read saw.
async function settle(pk, rk, want, what, cause) {
  const got = await read(pk, rk);
  if (want === null && got === null) {
    settled++;
    return;
  }
  if (want === null || got === null || got.nonce !== want.nonce || got.v !== want.v) {
    throw new Error(`${pk}/${rk}: ${what} answered ${cause.statusCode} ${cause.message}; the entity is ${JSON.stringify(got)}, not ${JSON.stringify(want)}`);
  }
  want.etag = got.etag;
  settled++;
}

async function worker(pk, model) {
  const entity = (rk, m) => ({ partitionKey: pk, rowKey: rk, Nonce: m.nonce, V: m.v });
  for (let i = 0; i < 8; i++) {
    const rk = `i${i}`;
    const m = { nonce: nonce(), v: 0, etag: "" };
    try {
      m.etag = (await table.createEntity(entity(rk, m))).etag;
    } catch (e) {
      if (e.statusCode !== 409) throw e;
      await settle(pk, rk, m, "insert", e);
    }
    model[rk] = m;
  }
  const batch = {};
  for (let i = 0; i < 5; i++) batch[`b${i}`] = { nonce: nonce(), v: 0, etag: "" };
  try {
    await table.submitTransaction(Object.entries(batch).map(([rk, m]) => ["create", entity(rk, m)]));
  } catch (e) {
    if (e.statusCode !== 409) throw e;
    for (const [rk, m] of Object.entries(batch)) await settle(pk, rk, m, "batch", e);
  }
  Object.assign(model, batch);
  for (let i = 0; i < 8; i++) {
    const rk = `i${i % 4}`;
    const cur = await read(pk, rk);
    if (cur === null || cur.nonce !== model[rk].nonce || cur.v !== model[rk].v) {
      throw new Error(`${pk}/${rk}: read ${JSON.stringify(cur)}, want ${JSON.stringify(model[rk])}`);
    }
    const m = { nonce: nonce(), v: cur.v + 1, etag: "" };
    try {
      m.etag = (await table.updateEntity(entity(rk, m), "Replace", { etag: cur.etag })).etag;
    } catch (e) {
      if (e.statusCode !== 412) throw e;
      await settle(pk, rk, m, "update", e);
    }
    model[rk] = m;
  }
  for (let i = 0; i < 3; i++) {
    const rk = `u${i}`;
    const m = { nonce: nonce(), v: 7, etag: "" };
    m.etag = (await table.upsertEntity(entity(rk, m), "Replace")).etag;
    model[rk] = m;
  }
  for (let i = 5; i < 8; i++) {
    const rk = `i${i}`;
    try {
      await table.deleteEntity(pk, rk, { etag: model[rk].etag });
    } catch (e) {
      if (e.statusCode !== 404) throw e;
      await settle(pk, rk, null, "delete", e);
    }
    delete model[rk];
  }
}

const models = {};
await Promise.all(["js0", "js1", "js2", "js3"].map((pk) => worker(pk, (models[pk] = {}))));
console.log(JSON.stringify({ settled, models }));
