// Drives a Tabula server with the official JS SDK (@azure/data-tables):
// tables, every Edm type, filters, $select, a transaction, optimistic
// concurrency and deletes. server/js_test.go runs it once per way of
// reaching the server, set by the environment:
//
//   TABULA_CONNECTION_STRING  connect with this connection string (Shared Key)
//   TABULA_TABLE_ENDPOINT     or: the account's table endpoint, with
//   TABULA_BEARER=1           a Microsoft Entra ID token credential
//   TABULA_LOOPBACK_HOSTS=1   resolve *.localhost to 127.0.0.1 (production-style
//                             URLs such as https://devstoreaccount1.table.localhost)
//
// HTTPS endpoints are trusted through NODE_EXTRA_CA_CERTS. Any mismatch
// exits non-zero.
import dns from "node:dns";
import { TableClient, TableServiceClient, odata } from "@azure/data-tables";
import assert from "node:assert/strict";

if (process.env.TABULA_LOOPBACK_HOSTS === "1") {
  // Not every resolver maps *.localhost to loopback (RFC 6761 asks it
  // to); Node's connections look hosts up through dns.lookup.
  const lookup = dns.lookup;
  dns.lookup = (host, options, callback) => {
    if (!host.endsWith(".localhost")) {
      return lookup(host, options, callback);
    }
    if (typeof options === "function") {
      callback = options;
      options = {};
    }
    if (options && options.all) {
      return process.nextTick(callback, null, [{ address: "127.0.0.1", family: 4 }]);
    }
    return process.nextTick(callback, null, "127.0.0.1", 4);
  };
}

// bearerCredential mints unsigned tokens of the shape Entra ID issues for
// the storage audience; a development server checks their claims only.
const bearerCredential = {
  async getToken() {
    const now = Math.floor(Date.now() / 1000);
    const enc = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
    const claims = {
      aud: "https://storage.azure.com",
      iss: "https://sts.windows.net/72f988bf-86f1-41af-91ab-2d7cd011db47/",
      tid: "72f988bf-86f1-41af-91ab-2d7cd011db47",
      iat: now, nbf: now, exp: now + 3600,
    };
    return { token: `${enc({ alg: "RS256", typ: "JWT" })}.${enc(claims)}.c2ln`, expiresOnTimestamp: (now + 3600) * 1000 };
  },
};

const conn = process.env.TABULA_CONNECTION_STRING;
const endpoint = process.env.TABULA_TABLE_ENDPOINT;
const tableName = "jssdk" + Date.now();
const options = { allowInsecureConnection: true };
let service, table;
if (conn) {
  service = TableServiceClient.fromConnectionString(conn, options);
  table = TableClient.fromConnectionString(conn, tableName, options);
} else if (endpoint && process.env.TABULA_BEARER === "1") {
  service = new TableServiceClient(endpoint, bearerCredential);
  table = new TableClient(endpoint, tableName, bearerCredential);
} else {
  console.error("set TABULA_CONNECTION_STRING, or TABULA_TABLE_ENDPOINT with TABULA_BEARER=1");
  process.exit(2);
}

async function expectStatus(promise, status, what) {
  try {
    await promise;
  } catch (e) {
    assert.equal(e.statusCode, status, `${what}: status ${e.statusCode}, want ${status}: ${e.message}`);
    return;
  }
  assert.fail(`${what}: succeeded, want status ${status}`);
}

await service.createTable(tableName);
let listed = [];
for await (const t of service.listTables({ queryOptions: { filter: odata`TableName eq ${tableName}` } })) {
  listed.push(t.name);
}
assert.deepEqual(listed, [tableName], "listTables with a filter");

const when = new Date("2024-02-29T12:34:56.789Z");
const entity = {
  partitionKey: "p1",
  rowKey: "r1",
  Text: "héllo 'quoted' ✓",
  Int32: 42,
  Int64: { value: "9223372036854775807", type: "Int64" },
  Double: 3.25,
  WholeDouble: { value: "2", type: "Double" },
  Bool: true,
  When: when,
  Id: { value: "c9da6455-213d-42c9-9a79-3e9149a57833", type: "Guid" },
  Bytes: new Uint8Array([0, 1, 2, 254, 255]),
};
await table.createEntity(entity);
await expectStatus(table.createEntity(entity), 409, "inserting an existing entity");

const got = await table.getEntity("p1", "r1");
assert.equal(got.Text, entity.Text);
assert.equal(got.Int32, 42);
// Depending on the SDK version Int64 arrives as a BigInt or as {value, type}.
assert.equal(BigInt(got.Int64.value ?? got.Int64), 9223372036854775807n);
assert.equal(got.Double, 3.25);
assert.equal(Number(got.WholeDouble.value ?? got.WholeDouble), 2);
assert.equal(got.Bool, true);
assert.equal(got.When.getTime(), when.getTime());
assert.equal(got.Id.value ?? got.Id, "c9da6455-213d-42c9-9a79-3e9149a57833");
assert.deepEqual(Array.from(got.Bytes), [0, 1, 2, 254, 255]);
assert.ok(got.etag && got.etag.startsWith('W/"datetime'), `etag ${got.etag}`);
assert.ok(got.timestamp, "timestamp");

for (let i = 0; i < 10; i++) {
  await table.createEntity({ partitionKey: "p2", rowKey: `r${i}`, N: i, Even: i % 2 === 0 });
}
let seen = [];
for await (const e of table.listEntities({ queryOptions: { filter: odata`PartitionKey eq ${"p2"} and N ge ${4} and Even eq ${true}` } })) {
  seen.push(e.rowKey);
}
assert.deepEqual(seen, ["r4", "r6", "r8"], "filtered query");
seen = [];
for await (const e of table.listEntities({ queryOptions: { filter: odata`PartitionKey eq ${"p2"}`, select: ["N"] } })) {
  assert.equal(e.Even, undefined, "$select left Even out");
  seen.push(e.N);
}
assert.deepEqual(seen, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], "query with select");

const tx = await table.submitTransaction([
  ["create", { partitionKey: "p2", rowKey: "new", N: 100 }],
  ["update", { partitionKey: "p2", rowKey: "r0", N: -1 }, "Merge"],
  ["upsert", { partitionKey: "p2", rowKey: "r1", Only: "this" }, "Replace"],
  ["delete", { partitionKey: "p2", rowKey: "r2" }],
]);
assert.equal(tx.status, 202, "transaction status");
assert.equal(tx.subResponses.length, 4, "transaction sub-responses");
assert.equal((await table.getEntity("p2", "new")).N, 100);
const r0 = await table.getEntity("p2", "r0");
assert.equal(r0.N, -1);
assert.equal(r0.Even, true, "merge kept Even");
const r1 = await table.getEntity("p2", "r1");
assert.equal(r1.Only, "this");
assert.equal(r1.N, undefined, "replace dropped N");
await expectStatus(table.getEntity("p2", "r2"), 404, "reading a deleted entity");

await expectStatus(
  table.submitTransaction([
    ["create", { partitionKey: "p2", rowKey: "tx2" }],
    ["create", { partitionKey: "p2", rowKey: "new" }],
  ]),
  409,
  "a transaction inserting an existing entity",
);
await expectStatus(table.getEntity("p2", "tx2"), 404, "the failed transaction's first insert");

const before = await table.getEntity("p1", "r1");
await table.updateEntity({ partitionKey: "p1", rowKey: "r1", Text: "v2" }, "Merge", { etag: before.etag });
await expectStatus(
  table.updateEntity({ partitionKey: "p1", rowKey: "r1", Text: "v3" }, "Merge", { etag: before.etag }),
  412,
  "an update with a stale etag",
);
assert.equal((await table.getEntity("p1", "r1")).Text, "v2");

await table.deleteEntity("p1", "r1");
await expectStatus(table.getEntity("p1", "r1"), 404, "reading a deleted entity");
await service.deleteTable(tableName);
await expectStatus(table.getEntity("p2", "r0"), 404, "reading from a deleted table");
console.log("JS SDK smoke: ok");
