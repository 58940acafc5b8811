//! Starts a geo-replicated pair of real Pulsar brokers, prints their URLs and
//! how long the start took, and keeps them up until Enter is pressed.
//!
//! ```text
//! cargo run -p bkswitch-pulsar-harness --example geo_pair
//! ```

use std::time::Instant;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    bkswitch_pulsar_harness::pulsar_available();
    let started = Instant::now();
    let pair = bkswitch_pulsar_harness::GeoPair::start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    println!("started in {:.1} s", started.elapsed().as_secs_f64());
    for broker in pair.brokers() {
        println!(
            "{}: {} {} bookie {} pid {:?} folder {}",
            broker.name(),
            broker.broker_url(),
            broker.http_url(),
            broker.bookie_port(),
            broker.pid(),
            broker.dir().display()
        );
        for socket in broker.listening_sockets() {
            println!("  listens on {socket}");
        }
    }
    println!("press Enter to stop");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}
