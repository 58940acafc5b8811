//! `nemesis run --histories N --seed S [--stack embedded|real] [--jobs J]` and
//! `nemesis replay --seed S [--keep i,j,…]`,
//! `nemesis migration --histories N --seed S [--trace]`.

use std::process::ExitCode;

use bkswitch_nemesis::{plan_of, run_embedded, shrink::shrink};
use clap::{Parser, Subcommand, ValueEnum};

/// A seeded nemesis over the bkswitch stack.
#[derive(Debug, Parser)]
#[command(name = "nemesis", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum StackKind {
    /// In-process nodes on in-memory metadata and bookies (deterministic).
    Embedded,
    /// `bookie-switch serve` processes on real ZooKeeper and real bookies.
    Real,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs histories with seeds S, S+1, …, S+N-1 and reports every failure
    /// with its replay command.
    Run {
        /// How many histories.
        #[arg(long, default_value_t = 100)]
        histories: u64,
        /// The first seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Which stack.
        #[arg(long, value_enum, default_value_t = StackKind::Embedded)]
        stack: StackKind,
        /// Shrink each failing history (embedded only), running at most this
        /// many histories per failure.
        #[arg(long, default_value_t = 0)]
        shrink: usize,
        /// Threads running embedded histories at once.
        #[arg(long, default_value_t = 1)]
        jobs: u64,
    },
    /// Prints how many operations and faults the plans of seeds S..S+N-1
    /// hold, without running them (for reporting a run that was cut short).
    Plans {
        /// How many histories.
        #[arg(long)]
        histories: u64,
        /// The first seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Runs migration histories (moving the metadata store between
    /// in-memory backends under conditional writers, with coordinator and
    /// participant faults) with seeds S, S+1, …, S+N-1.
    Migration {
        /// How many histories.
        #[arg(long, default_value_t = 20)]
        histories: u64,
        /// The first seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Print every history's trace.
        #[arg(long)]
        trace: bool,
    },
    /// Replays one embedded history and prints its trace and violations.
    Replay {
        /// The seed.
        #[arg(long)]
        seed: u64,
        /// Only these operations of the seed's plan (a shrunk history).
        #[arg(long, value_delimiter = ',')]
        keep: Option<Vec<usize>>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run {
            histories,
            seed,
            stack: StackKind::Embedded,
            shrink: budget,
            jobs,
        } => {
            let mut done = 0u64;
            let mut failed = 0u64;
            let totals = bkswitch_nemesis::run_many_jobs(seed, histories, jobs, |o| {
                done += 1;
                failed += u64::from(!o.passed());
                if done % 100 == 0 {
                    eprintln!("progress: {done} histories, {failed} failed");
                }
                if !o.passed() {
                    print!("{}", o.report());
                    if budget > 0 {
                        let s = shrink(o, budget);
                        println!(
                            "  shrunk to {} operations: {}",
                            s.figures.ops,
                            s.replay_command()
                        );
                    }
                }
            });
            println!("{totals:?}");
            let kinds: Vec<String> = totals
                .fault_kinds
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            println!("Faults by kind: {}", kinds.join(", "));
            println!(
                "Below the metadata: {} bookie copies lost; {} corruptions, {} refused with an \
                 error naming them; {} histories with stale reads, {} reads older than the leader",
                totals.copies_lost,
                totals.corruptions,
                totals.corruptions_refused,
                totals.stale_histories,
                totals.stale_reads
            );
            if totals.failed.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Command::Run {
            histories,
            seed,
            stack: StackKind::Real,
            ..
        } => match bkswitch_nemesis::real::run_real(seed, histories) {
            Ok(totals) => {
                println!("{totals:?}");
                if totals.failed.is_empty() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(e) => {
                eprintln!("the real stack did not start: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Plans { histories, seed } => {
            let (mut ops, mut faults) = (0, 0);
            for s in seed..seed + histories {
                let p = bkswitch_nemesis::Plan::generate(s);
                ops += p.ops.len();
                faults += p.faults();
            }
            println!("{histories} plans from seed {seed}: {ops} operations, {faults} faults");
            ExitCode::SUCCESS
        }
        Command::Migration {
            histories,
            seed,
            trace,
        } => {
            let (mut acked, mut ended, mut refused) = (0, [0; 3], 0);
            let failed =
                bkswitch_nemesis::migration::run_migration_histories(seed, histories, |o| {
                    if trace || !o.passed() {
                        for line in &o.trace {
                            println!("{line}");
                        }
                    }
                    print!("{o}");
                    acked += o.acked;
                    refused += o.refused;
                    for (t, n) in ended.iter_mut().zip(o.ended) {
                        *t += n;
                    }
                });
            println!(
                "Totals: {histories} migration histories, {} failed, {acked} acknowledged \
                 writes, {} completed, {} failed, {} aborted migrations, {refused} starts \
                 refused",
                failed.len(),
                ended[0],
                ended[1],
                ended[2]
            );
            if failed.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Command::Replay { seed, keep } => {
            let plan = plan_of(seed, keep.as_deref());
            let mut o = run_embedded(&plan);
            o.kept = keep;
            for line in &o.trace {
                println!("{line}");
            }
            print!("{}", o.report());
            if o.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
