-- Version 10: each claim's token, random per claim written (`store::claims`). The calls that
-- took or shared a claim hold its token, and the gate forwards only while the claim it reads has
-- the same one. The idempotency key alone did not say which claim it was: a call sharing a claim
-- could end it on its refusal, an update could then slip in and change the basket, and a new
-- claim under the same key would have passed the first call's gate with the basket it never
-- checked. A claim written before this version, or by an older CajaGuard still running, has
-- token 0, which no call holds or shares (`claims::NO_TOKEN`): its gate refuses (`ClaimLost`)
-- and the payment is asked again.
ALTER TABLE claims ADD COLUMN token BIGINT NOT NULL DEFAULT 0;
