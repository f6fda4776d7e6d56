-- Version 4 (SPEC §8 "Tamper-evident audit log"): every audit row is a leaf of a Merkle log. The
-- same as SQLite's schema version 4 (store/sqlite/log.rs). Rows from before get their places when
-- a store opens (store/log.rs, `open`).

-- The record's place in the log (0, 1, 2, ... without gaps) and the tree hashes its append stored
-- (the "stored hashes" of Go's sumdb/tlog: 32 bytes each, 1 + trailing ones of log_index).
ALTER TABLE audit ADD COLUMN log_index BIGINT;
ALTER TABLE audit ADD COLUMN log_hashes BYTEA;
CREATE UNIQUE INDEX audit_log_index ON audit (log_index);

-- The log's head: its origin (the checkpoints' first line, random per store) and its size. Every
-- append bumps the size in its own transaction, so this row's lock orders the appends.
CREATE TABLE audit_log (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    origin TEXT NOT NULL,
    size   BIGINT NOT NULL
);

-- Signed checkpoints (C2SP tlog-checkpoint in a signed note), one per tree size.
CREATE TABLE audit_checkpoints (
    tree_size  BIGINT PRIMARY KEY,
    note       TEXT NOT NULL,
    written_at BIGINT NOT NULL
);

-- The signed-note verifier keys of the hosts' log keys (each host's home has its own).
CREATE TABLE audit_log_keys (
    verifier_key TEXT PRIMARY KEY,
    added_at     BIGINT NOT NULL
);
