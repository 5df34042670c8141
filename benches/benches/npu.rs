//! `cargo bench -p npu-benches [-- PART...]`: runs every section (or the parts named) and
//! prints one table, with the machine's load before and after.

use npu_benches::{Filter, Table, stats};

fn main() {
    let filter = Filter::new(std::env::args().skip(1));
    let mut table = Table::default();
    let load_before = stats::load_average();
    let cpu_before = stats::CpuTime::now();
    if filter.wants("simulator") {
        npu_benches::sim::run(&mut table);
    }
    if filter.wants("pool") {
        npu_benches::pool::run(&mut table);
    }
    npu_benches::stream::run(&mut table, &filter);
    if filter.wants("alternatives") {
        npu_benches::alternatives::run(&mut table);
    }
    if filter.wants("pipeline") {
        npu_benches::pipeline::run(&mut table);
    }
    if filter.wants("host") {
        npu_benches::host::run(&mut table);
    }
    table.push(
        "machine",
        "load average (1, 5, 15 min): before / after the run",
        format!("{} / {}", load_before, stats::load_average()),
        format!(
            "{} cores; /proc/loadavg, so it counts the bench's own threads too",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        ),
    );
    table.push(
        "machine",
        "CPU time stolen by the hypervisor over the run",
        stats::stolen(cpu_before),
        "/proc/stat steal ticks over all ticks: the share of the run in which a virtual machine's CPUs were running other guests",
    );
    println!("{table}");
}
