-- CajaGuard's shared store, version 1. The same tables as the embedded SQLite store (see
-- store/sqlite/schema.rs), plus `currency_locks` (what gate transactions lock) and `approvals`
-- (the signed documents themselves, so every host sees them).
--
-- Times are Unix microseconds (BIGINT) as in SQLite, so the store's Rust code reads both alike.

CREATE TABLE ledger (
    checkout_id     TEXT PRIMARY KEY,
    idempotency_key TEXT NOT NULL,
    merchant        TEXT NOT NULL,
    currency        TEXT NOT NULL,
    reserved        BIGINT NOT NULL,
    charged         BIGINT,
    state           TEXT NOT NULL CHECK (state IN ('in_flight', 'settled', 'released')),
    hour            BIGINT NOT NULL,
    reserved_at     BIGINT NOT NULL,
    settled_at      BIGINT
);
CREATE INDEX ledger_in_flight ON ledger (reserved_at) WHERE state = 'in_flight';

-- The window sum reads only these: one row per currency and hour, kept in the same transactions
-- that change the ledger, so a decision costs the same with 10^3 or 10^6 ledger rows.
CREATE TABLE spend_buckets (
    currency  TEXT NOT NULL,
    hour      BIGINT NOT NULL,
    settled   BIGINT NOT NULL DEFAULT 0,
    in_flight BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (currency, hour)
);

-- One row per currency, locked (FOR UPDATE, via an upsert) by every gate transaction in that
-- currency: two hosts deciding in one currency take turns, exactly as SQLite's BEGIN IMMEDIATE.
CREATE TABLE currency_locks (
    currency TEXT PRIMARY KEY
);

CREATE TABLE used_approvals (
    nonce       TEXT PRIMARY KEY,
    request_id  TEXT NOT NULL,
    checkout_id TEXT NOT NULL,
    used_at     BIGINT NOT NULL
);
CREATE INDEX used_approvals_request ON used_approvals (request_id);

-- Signed approval documents as `cajaguard approve` wrote them (the JSON a file would hold).
CREATE TABLE approvals (
    request_id TEXT NOT NULL,
    nonce      TEXT NOT NULL,
    document   TEXT NOT NULL,
    filed_at   BIGINT NOT NULL,
    PRIMARY KEY (request_id, nonce)
);

CREATE TABLE pending (
    request_id  TEXT PRIMARY KEY,
    digest      TEXT NOT NULL,
    merchant    TEXT NOT NULL,
    checkout_id TEXT NOT NULL,
    currency    TEXT NOT NULL,
    total       BIGINT NOT NULL,
    handler_ids TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('pending', 'used')),
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);

CREATE TABLE audit (
    id              BIGSERIAL PRIMARY KEY,
    at              TEXT NOT NULL,
    at_us           BIGINT NOT NULL,
    tool            TEXT NOT NULL,
    verdict         TEXT NOT NULL,
    reason          TEXT NOT NULL,
    merchant        TEXT,
    currency        TEXT,
    total           BIGINT,
    request_id      TEXT,
    idempotency_key TEXT,
    checkout_id     TEXT,
    latency_us      BIGINT NOT NULL,
    note            TEXT
);
