// Enqueue mysqlq jobs from Node.js with mysql2, in the caller's transaction.
//
// Run by tests/other_languages.rs: MYSQLQ_DB_* name the database; prints one JSON line with the
// order ids committed, the jobs enqueued with them, and the refused input's error.
import mysql from "mysql2/promise";

const conn = await mysql.createConnection({
  host: process.env.MYSQLQ_DB_HOST,
  port: Number(process.env.MYSQLQ_DB_PORT),
  user: process.env.MYSQLQ_DB_USER,
  password: process.env.MYSQLQ_DB_PASSWORD ?? "",
  database: process.env.MYSQLQ_DB_NAME,
});

// --- snippet: node
async function placeOrder(conn, total) {
  // The order and its email job in one transaction: both or neither.
  const [order] = await conn.execute("INSERT INTO orders (total) VALUES (?)", [total]);
  await conn.execute("CALL mysqlq_enqueue(?, ?, ?)", [
    "noop",
    JSON.stringify({ n: order.insertId }),
    JSON.stringify({ queue: "test" }),
  ]);
  const [[job]] = await conn.query("SELECT @mysqlq_job_id AS id, @mysqlq_enqueued AS outcome");
  return [order.insertId, Number(job.id), job.outcome];
}
// --- end snippet

const out = { committed: [], jobs: [], rolled_back: [], error: null };

await conn.beginTransaction();
let [orderId, jobId, outcome] = await placeOrder(conn, 10);
await conn.commit();
out.committed.push(orderId);
out.jobs.push([jobId, outcome]);

await conn.beginTransaction();
[orderId] = await placeOrder(conn, 20);
await conn.rollback();
out.rolled_back.push(orderId);

// Bad input: the procedure refuses it with SQLSTATE 45000; the transaction is rolled back and
// nothing of it stays.
await conn.beginTransaction();
try {
  const [order] = await conn.execute("INSERT INTO orders (total) VALUES (?)", [30]);
  await conn.execute("CALL mysqlq_enqueue(?, ?, ?)", [
    "noop",
    JSON.stringify({ n: order.insertId }),
    JSON.stringify({ queue: "bad queue" }),
  ]);
  await conn.commit();
} catch (e) {
  await conn.rollback();
  out.error = [e.errno, e.sqlMessage];
}

await conn.beginTransaction();
[orderId, jobId, outcome] = await placeOrder(conn, 40);
await conn.commit();
out.committed.push(orderId);
out.jobs.push([jobId, outcome]);

console.log(JSON.stringify(out));
await conn.end();
