// A workflow drawn with @xyflow/react: nodes at their positions (or ELK's), edges labelled
// with their selectors, optionally coloured by each node's latest step status.

import { Background, Controls, MarkerType, Position, ReactFlow, type Edge, type Node } from "@xyflow/react";
import "@xyflow/react/dist/style.css";
import { useEffect, useState } from "react";
import { layout, type Graph } from "./graph";

export function Canvas({ graph, status }: { graph: Graph; status?: Map<string, string> }) {
  const [nodes, setNodes] = useState<Node[]>([]);
  useEffect(() => {
    let stop = false;
    void layout(graph).then((pos) => {
      if (stop) return;
      setNodes(
        graph.nodes.map((n) => ({
          id: n.id,
          position: pos.get(n.id) ?? { x: 0, y: 0 },
          data: { label: `${n.label}\n${n.type}` },
          className: `wf-node ${n.type} ${status?.get(n.id) ?? ""} ${n.entry ? "entry" : ""}`,
          draggable: false,
          connectable: false,
          // Documents flow left to right (graph positions, ELK's layered layout).
          sourcePosition: Position.Right,
          targetPosition: Position.Left,
        })),
      );
    });
    return () => {
      stop = true;
    };
  }, [graph, status]);
  const edges: Edge[] = graph.edges.map((e) => ({
    id: e.id,
    source: e.source,
    target: e.target,
    label: e.label,
    animated: status?.get(e.source) === "running",
    markerEnd: { type: MarkerType.ArrowClosed },
    className: e.back ? "back" : "",
  }));
  return (
    <div className="canvas" data-testid="canvas">
      <ReactFlow nodes={nodes} edges={edges} fitView minZoom={0.1} nodesDraggable={false} nodesConnectable={false} proOptions={{ hideAttribution: true }}>
        <Background />
        <Controls showInteractive={false} />
      </ReactFlow>
    </div>
  );
}
