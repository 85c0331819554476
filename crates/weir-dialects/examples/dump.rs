fn main() {
    let p = std::env::args().nth(1).unwrap();
    let t = std::fs::read_to_string(&p).unwrap();
    let l = weir_dialects::load(&p, &t);
    for d in &l.diagnostics { print!("{}", d.render(Some(&t))); }
    println!("{:?}", l.workflow.map(|w| (w.name, w.nodes.len(), w.edges.len())));
}
