//! The one integration-test binary of iterion-sandbox: the policy functions
//! chained the way the runtime chains them, on a real temporary repo.

mod flow;
