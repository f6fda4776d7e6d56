-- Version 8: which agent of the service the shop made each checkout, cart and order for
-- (store/agents.rs, proxy/agents.rs). The service's agents share one shop link, so the shop
-- cannot tell them apart: without this, an agent that learns another's checkout or cart id could
-- change its basket or destination before the other pays it, cancel it, pay it or read it, and
-- read another's order. What a `create_checkout` or `create_cart` through the service makes, and
-- the order a payment through it places, is recorded here before its agent is told the id; a
-- service session refuses every call on a checkout, cart or order that is not its agent's.
-- `cajaguard mcp` on stdio (one user, no agent) neither records nor checks.
CREATE TABLE made_for_agent (
    object     TEXT NOT NULL CHECK (object IN ('checkout', 'cart', 'order')),
    id         TEXT NOT NULL,
    agent      TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (object, id)
);
