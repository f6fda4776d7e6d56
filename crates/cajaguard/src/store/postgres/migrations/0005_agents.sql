-- Agents of the service (SPEC §13).
--
-- `agent` on the ledger, pending requests and audit rows: who paid or asked. An agent's own
-- window is read from `spend_buckets` rows whose currency column holds the account `CUR/agent`
-- (store/ledger.rs), changed in the same transactions and under the same currency lock as the
-- currency's own rows, so per-agent and global caps are checked together.
ALTER TABLE ledger ADD COLUMN agent TEXT;
ALTER TABLE pending ADD COLUMN agent TEXT;
ALTER TABLE audit ADD COLUMN agent TEXT;

-- Tokens made by `cajaguard agent add`, as their SHA-256 (hex): the store can say whose a token
-- is, never hand one back.
CREATE TABLE agent_tokens (
    name         TEXT PRIMARY KEY,
    token_sha256 TEXT NOT NULL UNIQUE,
    created_at   BIGINT NOT NULL
);
