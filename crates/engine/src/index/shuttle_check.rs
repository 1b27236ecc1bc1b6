//! The driver of both indexes' schedule tests (`cfg(engine_shuttle)`).

/// Runs `body` under many schedules of both of shuttle's schedulers: PCT
/// (depth 3) and uniform random, 20,000 each.
pub(super) fn check(body: impl Fn() + Send + Sync + 'static) {
    let body = std::sync::Arc::new(body);
    let pct = body.clone();
    shuttle::check_pct(move || pct(), 20_000, 3);
    shuttle::check_random(move || body(), 20_000);
}
