//! The oracle's graph runner: orders a loaded [`Model`]'s nodes topologically, evaluates the
//! nodes that depend only on initializers once at load time (constant folding: the same op
//! functions, run once instead of every step), and runs the rest one node at a time through
//! [`crate::ops`], freeing each value after its last use.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;

use crate::error::{Error, Result};
use crate::load::{ExternalData, Model, Node, Port};
use crate::ops::{self, run_op_with};
use crate::tensor::OTensor;

/// A model ready to run.
pub struct Graph {
    pub opset: i64,
    pub inputs: Vec<Port>,
    pub outputs: Vec<Port>,
    /// Nodes that depend on graph inputs, in topological order.
    nodes: Vec<Node>,
    /// Initializers plus the outputs of folded nodes.
    constants: HashMap<String, OTensor>,
    /// For each node of `nodes`, the values whose last use it is.
    frees: Vec<Vec<String>>,
}

impl Graph {
    /// Checks every op is supported (listing all that are not), orders the nodes, folds constants.
    pub fn new(model: Model) -> Result<Graph> {
        let unsupported: BTreeSet<String> = model
            .nodes
            .iter()
            .filter(|n| !ops::is_supported(&n.domain, &n.op_type))
            .map(|n| {
                if n.domain.is_empty() {
                    n.op_type.clone()
                } else {
                    format!("{}::{}", n.domain, n.op_type)
                }
            })
            .collect();
        if !unsupported.is_empty() {
            return Err(Error::package(
                &model.path,
                format!(
                    "the oracle does not implement {}",
                    unsupported.into_iter().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        let order = topological_order(&model)?;
        let dir = model.path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let mut external = ExternalData::new(&dir);
        let input_names: HashSet<&str> = model.inputs.iter().map(|p| p.name.as_str()).collect();
        let mut constants = model.initializers;
        let mut nodes = Vec::new();
        for i in order {
            let node = &model.nodes[i];
            let foldable = node.inputs.iter().all(|n| {
                n.is_empty() || (!input_names.contains(n.as_str()) && constants.contains_key(n))
            });
            if !foldable {
                nodes.push(node.clone());
                continue;
            }
            let inputs: Vec<Option<OTensor>> = node
                .inputs
                .iter()
                .map(|n| {
                    if n.is_empty() {
                        None
                    } else {
                        constants.get(n).cloned()
                    }
                })
                .collect();
            let outs = run_op_with(
                &node.op_type,
                &node.domain,
                &node.attributes,
                &inputs,
                node.outputs.len(),
                model.opset,
                Some(&mut external),
            )
            .map_err(|e| node_error(node, e))?;
            for (name, value) in node.outputs.iter().zip(outs) {
                if let (false, Some(v)) = (name.is_empty(), value) {
                    constants.insert(name.clone(), v);
                }
            }
        }
        let outputs_needed: HashSet<&str> = model.outputs.iter().map(|p| p.name.as_str()).collect();
        let mut last_use: HashMap<&str, usize> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            for inp in n.inputs.iter().filter(|s| !s.is_empty()) {
                last_use.insert(inp, i);
            }
        }
        let mut frees = vec![Vec::new(); nodes.len()];
        for (name, i) in last_use {
            if !outputs_needed.contains(name) && !constants.contains_key(name) {
                frees[i].push(name.to_string());
            }
        }
        Ok(Graph {
            opset: model.opset,
            inputs: model.inputs,
            outputs: model.outputs,
            nodes,
            constants,
            frees,
        })
    }

    /// Runs the graph on `feeds` (graph input name → value) and returns every graph output.
    pub fn run(&self, feeds: HashMap<String, OTensor>) -> Result<HashMap<String, OTensor>> {
        for name in feeds.keys() {
            if !self.inputs.iter().any(|p| &p.name == name) {
                return Err(Error::msg(format!(
                    "{name:?} is not a graph input (inputs: {})",
                    self.inputs
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
        let mut values = feeds;
        for (node, frees) in self.nodes.iter().zip(&self.frees) {
            let mut inputs = Vec::with_capacity(node.inputs.len());
            for name in &node.inputs {
                if name.is_empty() {
                    inputs.push(None);
                    continue;
                }
                let v = values.get(name).or_else(|| self.constants.get(name)).ok_or_else(|| {
                    node_error(
                        node,
                        Error::msg(format!(
                            "input {name:?} is not available (not fed, or an optional output its producer does not compute)"
                        )),
                    )
                })?;
                inputs.push(Some(v.clone()));
            }
            let outs = run_op_with(
                &node.op_type,
                &node.domain,
                &node.attributes,
                &inputs,
                node.outputs.len(),
                self.opset,
                None,
            )
            .map_err(|e| node_error(node, e))?;
            drop(inputs);
            for name in frees {
                values.remove(name);
            }
            for (name, value) in node.outputs.iter().zip(outs) {
                if let (false, Some(v)) = (name.is_empty(), value) {
                    values.insert(name.clone(), v);
                }
            }
        }
        let mut out = HashMap::new();
        for p in &self.outputs {
            let v = values
                .get(&p.name)
                .or_else(|| self.constants.get(&p.name))
                .ok_or_else(|| Error::msg(format!("graph output {:?} was not computed", p.name)))?;
            out.insert(p.name.clone(), v.clone());
        }
        Ok(out)
    }
}

impl std::fmt::Debug for Graph {
    /// A summary: the constants are far too large to print.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("opset", &self.opset)
            .field("inputs", &self.inputs.len())
            .field("outputs", &self.outputs.len())
            .field("nodes", &self.nodes.len())
            .field("constants", &self.constants.len())
            .finish()
    }
}

fn node_error(node: &Node, e: Error) -> Error {
    Error::Node {
        node: node.name.clone(),
        op: node.op_type.clone(),
        message: e.into_message(),
    }
}

/// Kahn's algorithm; among ready nodes the one earliest in the file goes first. Errors on an input
/// nothing produces (a dangling edge) and on cycles.
fn topological_order(model: &Model) -> Result<Vec<usize>> {
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, n) in model.nodes.iter().enumerate() {
        for o in n.outputs.iter().filter(|o| !o.is_empty()) {
            if producer.insert(o, i).is_some() || model.initializers.contains_key(o) {
                return Err(node_error(
                    n,
                    Error::msg(format!("output {o:?} is produced twice")),
                ));
            }
        }
    }
    let available: HashSet<&str> = model
        .inputs
        .iter()
        .map(|p| p.name.as_str())
        .chain(model.initializers.keys().map(String::as_str))
        .collect();
    let mut waiting = vec![0usize; model.nodes.len()];
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); model.nodes.len()];
    for (i, n) in model.nodes.iter().enumerate() {
        for inp in n.inputs.iter().filter(|s| !s.is_empty()) {
            if available.contains(inp.as_str()) {
                continue;
            }
            match producer.get(inp.as_str()) {
                Some(&p) => {
                    waiting[i] += 1;
                    consumers[p].push(i);
                }
                None => {
                    return Err(node_error(
                        n,
                        Error::msg(format!(
                            "input {inp:?} is not produced by any node, graph input or initializer"
                        )),
                    ));
                }
            }
        }
    }
    for o in &model.outputs {
        if !available.contains(o.name.as_str()) && !producer.contains_key(o.name.as_str()) {
            return Err(Error::package(
                &model.path,
                format!("graph output {:?} is not produced by any node", o.name),
            ));
        }
    }
    let mut ready: BTreeSet<usize> = (0..model.nodes.len())
        .filter(|&i| waiting[i] == 0)
        .collect();
    let mut order = Vec::with_capacity(model.nodes.len());
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &c in &consumers[i] {
            waiting[c] -= 1;
            if waiting[c] == 0 {
                ready.insert(c);
            }
        }
    }
    if order.len() != model.nodes.len() {
        let stuck = (0..model.nodes.len())
            .find(|&i| waiting[i] > 0)
            .map(|i| &model.nodes[i]);
        let name = stuck.map_or("?".to_string(), |n| format!("{} ({})", n.name, n.op_type));
        return Err(Error::package(
            &model.path,
            format!("the graph has a cycle through node {name}"),
        ));
    }
    Ok(order)
}
