"""Validate payloads against the job catalogue before enqueueing, from Python.

Run by tests/other_languages.rs: MYSQLQ_DB_* name the database, MYSQLQ_CATALOGUE the file
`worker kinds --json` printed, MYSQLQ_CASES a JSON list of [kind, payload]. Prints one JSON line:
for each case, the enqueued job's id, or the validation error's path and message.
"""
import json
import os

import jsonschema
import pymysql

conn = pymysql.connect(
    host=os.environ["MYSQLQ_DB_HOST"],
    port=int(os.environ["MYSQLQ_DB_PORT"]),
    user=os.environ["MYSQLQ_DB_USER"],
    password=os.environ.get("MYSQLQ_DB_PASSWORD", ""),
    database=os.environ["MYSQLQ_DB_NAME"],
    autocommit=False,
)

# --- snippet: python-validate
# The catalogue the worker binary prints: `worker kinds --json > kinds.json`.
with open(os.environ["MYSQLQ_CATALOGUE"]) as f:
    CATALOGUE = {k["kind"]: k for k in json.load(f)["kinds"]}


def enqueue_checked(cur, kind, payload, options=None):
    """Refuses a payload the job would not decode, before it reaches the database."""
    job = CATALOGUE[kind]  # KeyError: no such job in this worker
    if job["payload_schema"] is not None:
        # Raises jsonschema.ValidationError, whose .path names the field.
        jsonschema.validate(payload, job["payload_schema"])
    options = {"queue": job["queue"], **(options or {})}
    cur.execute(
        "CALL mysqlq_enqueue(%s, %s, %s)",
        (kind, json.dumps(payload), json.dumps(options)),
    )
    cur.execute("SELECT @mysqlq_job_id")
    return cur.fetchone()[0]
# --- end snippet


out = []
for kind, payload in json.loads(os.environ["MYSQLQ_CASES"]):
    try:
        with conn.cursor() as cur:
            job_id = enqueue_checked(cur, kind, payload)
        conn.commit()
        out.append({"job_id": job_id})
    except jsonschema.ValidationError as e:
        conn.rollback()
        out.append({"path": list(e.path), "message": e.message})
print(json.dumps(out))
