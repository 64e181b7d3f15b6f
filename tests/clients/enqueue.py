"""Enqueue mysqlq jobs from Python with PyMySQL, in the caller's transaction.

Run by tests/other_languages.rs: MYSQLQ_DB_* name the database; prints one JSON line with the
order ids committed, the jobs enqueued with them, and the refused input's error.
"""
import json
import os

import pymysql

conn = pymysql.connect(
    host=os.environ["MYSQLQ_DB_HOST"],
    port=int(os.environ["MYSQLQ_DB_PORT"]),
    user=os.environ["MYSQLQ_DB_USER"],
    password=os.environ.get("MYSQLQ_DB_PASSWORD", ""),
    database=os.environ["MYSQLQ_DB_NAME"],
    autocommit=False,
)

# --- snippet: python
def place_order(conn, total):
    """Writes the order and its email job in one transaction: both or neither."""
    with conn.cursor() as cur:
        cur.execute("INSERT INTO orders (total) VALUES (%s)", (total,))
        order_id = cur.lastrowid
        cur.execute(
            "CALL mysqlq_enqueue(%s, %s, %s)",
            ("noop", json.dumps({"n": order_id}), json.dumps({"queue": "test"})),
        )
        cur.execute("SELECT @mysqlq_job_id, @mysqlq_enqueued")
        job_id, outcome = cur.fetchone()
    return order_id, job_id, outcome
# --- end snippet

out = {"committed": [], "jobs": [], "rolled_back": [], "error": None}

order_id, job_id, outcome = place_order(conn, 10)
conn.commit()
out["committed"].append(order_id)
out["jobs"].append([job_id, outcome])

order_id, job_id, outcome = place_order(conn, 20)
conn.rollback()
out["rolled_back"].append(order_id)

# Bad input: the procedure refuses it with SQLSTATE 45000; the transaction is rolled back and
# nothing of it stays.
try:
    with conn.cursor() as cur:
        cur.execute("INSERT INTO orders (total) VALUES (%s)", (30,))
        cur.execute(
            "CALL mysqlq_enqueue(%s, %s, %s)",
            ("noop", json.dumps({"n": cur.lastrowid}), json.dumps({"queue": "bad queue"})),
        )
    conn.commit()
except pymysql.err.MySQLError as e:
    conn.rollback()
    out["error"] = [e.args[0], e.args[1]]

order_id, job_id, outcome = place_order(conn, 40)
conn.commit()
out["committed"].append(order_id)
out["jobs"].append([job_id, outcome])

print(json.dumps(out))
