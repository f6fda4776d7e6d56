-- Version 3 (SPEC §6 "Approvals an agent cannot make"): passkeys, one-time registration links and
-- passkey approvals. The same as SQLite's schema version 3 (store/sqlite/passkeys.rs).

-- Registered passkeys. Ids and keys are hex. A removed passkey keeps its row (removed_at set):
-- the first passkey is trusted on first use only while this table has never had a row.
CREATE TABLE passkeys (
    credential_id   TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    algorithm       TEXT NOT NULL CHECK (algorithm IN ('ES256', 'EdDSA')),
    public_key      TEXT NOT NULL,
    -- The last signature counter seen; moved on by compare-and-set when an approval is used.
    sign_count      BIGINT NOT NULL,
    aaguid          TEXT NOT NULL,
    backup_eligible BOOLEAN NOT NULL,
    created_at      BIGINT NOT NULL,
    removed_at      BIGINT
);

-- One-time links from `cajaguard passkey add` (valid 5 minutes): only the token's SHA-256 is kept.
CREATE TABLE passkey_links (
    token_hash TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    expires_at BIGINT NOT NULL,
    used       BOOLEAN NOT NULL DEFAULT FALSE
);

-- Passkey approval documents (terms and assertion, as the page filed them). Their use is recorded
-- in used_approvals by nonce, like key-file approvals'.
CREATE TABLE passkey_approvals (
    request_id TEXT NOT NULL,
    nonce      TEXT NOT NULL UNIQUE,
    document   TEXT NOT NULL,
    filed_at   BIGINT NOT NULL,
    PRIMARY KEY (request_id, nonce)
);
