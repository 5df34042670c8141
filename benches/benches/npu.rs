//! `cargo bench -p npu-benches`: runs every section and prints one table.

fn main() {
    let mut table = npu_benches::Table::default();
    npu_benches::sim::run(&mut table);
    npu_benches::pool::run(&mut table);
    npu_benches::stream::run(&mut table);
    npu_benches::alternatives::run(&mut table);
    npu_benches::pipeline::run(&mut table);
    println!("{table}");
}
