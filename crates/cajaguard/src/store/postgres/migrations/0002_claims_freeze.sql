-- Version 2 (SPEC §4 step 3a, §4.13, §7): claims on checkouts, the digest a reservation was made
-- for, who released a reservation, and the freeze. The same as SQLite's schema version 2.

-- The request digest of the reserved attempt: a retry is forwarded only if its digest equals it.
ALTER TABLE ledger ADD COLUMN digest TEXT;
-- 'shop' (the shop's explicit word) or 'reconcile' (a stale attempt whose checkout read open):
-- reconciliation revisits the latter within the window in case the checkout later completes.
ALTER TABLE ledger ADD COLUMN released_by TEXT;
-- The paying agent's UCP profile: reconciliation reads the checkout back as that agent, since a
-- shop may refuse a profile it does not know.
ALTER TABLE ledger ADD COLUMN agent_profile TEXT;

-- A checkout being paid: from before the gate reads it back until the payment settles. While a
-- row is here, updates, cancels and other completes of that checkout are refused on every host.
CREATE TABLE claims (
    checkout_id     TEXT PRIMARY KEY,
    idempotency_key TEXT NOT NULL,
    claimed_at      BIGINT NOT NULL
);

-- An update or cancel of a checkout on its way to the shop: a complete waits for none, it is
-- refused while one is here (its answer could change the basket after the gate read it).
CREATE TABLE update_leases (
    lease_id    TEXT PRIMARY KEY,
    checkout_id TEXT NOT NULL,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX update_leases_checkout ON update_leases (checkout_id);

-- At most one row: payments are frozen while it exists.
CREATE TABLE payment_freeze (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    frozen_at BIGINT NOT NULL,
    reason    TEXT NOT NULL
);
