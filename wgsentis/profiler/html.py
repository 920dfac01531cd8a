"""Self-contained HTML report (no network): summary, time per op type, per-layer chart, sortable
layer table (fallback layers marked), roofline points, host/transfer rows and pruning estimates."""

# ruff: noqa: E501  (the embedded CSS and JavaScript keep their natural line lengths)
from __future__ import annotations

import html
import json
from typing import Any

_STYLE = """
body{font:14px system-ui,sans-serif;margin:24px;color:#1d2330;background:#fff}
h1{font-size:22px;margin:0 0 8px}h2{font-size:17px;margin:28px 0 8px}
.summary{display:grid;grid-template-columns:repeat(auto-fill,minmax(220px,1fr));gap:8px}
.card{background:#f1f4f9;border-radius:6px;padding:8px 12px}.card b{display:block;font-size:18px}
table{border-collapse:collapse;width:100%;font-size:13px}th,td{padding:3px 6px;border-bottom:1px solid #e3e7ee;text-align:right}
th{cursor:pointer;background:#e8edf5;position:sticky;top:0}th:hover{background:#d5def0}
td:nth-child(-n+3),th:nth-child(-n+3){text-align:left}tr.fallback td{background:#fdecea}
.tag{background:#d93025;color:#fff;border-radius:3px;padding:0 4px;font-size:11px}
svg text{font:11px system-ui,sans-serif}.note{color:#5f6b7a;font-size:12px}
"""

_SCRIPT = r"""
const P = JSON.parse(document.getElementById('profile-data').textContent);
const NS = 'http://www.w3.org/2000/svg';
function el(tag, attrs, text){const e=document.createElementNS(NS,tag);for(const k in attrs)e.setAttribute(k,attrs[k]);if(text!==undefined)e.textContent=text;return e;}
function fmt(v,d){return v===null||v===undefined?'-':(typeof v==='number'?v.toFixed(d===undefined?3:d):String(v));}
function si(v){if(v===null||v===undefined)return '-';const u=[['G',1e9],['M',1e6],['k',1e3]];for(const [n,s] of u){if(Math.abs(v)>=s)return (v/s).toFixed(2)+n;}return String(v);}
const timed = P.ms_per_batch !== null && P.ms_per_batch !== undefined;
const layers = P.layers;
const val = e => timed ? (e.time_ms||0) : e.flops;
const unit = timed ? 'ms' : 'FLOPs';

function hbars(id, rows){
  const svg=document.getElementById(id); const h=22, W=900, L=220;
  svg.setAttribute('viewBox',`0 0 ${W} ${rows.length*h+10}`); svg.setAttribute('height', rows.length*h+10);
  const max=Math.max(1e-12,...rows.map(r=>r[1]));
  rows.forEach((r,i)=>{
    svg.appendChild(el('text',{x:L-6,y:i*h+15,'text-anchor':'end'},r[0]));
    const w=(W-L-120)*r[1]/max;
    const rect=el('rect',{x:L,y:i*h+3,width:Math.max(w,1),height:h-6,fill:r[3]||'#3b6fd8'});
    rect.appendChild(el('title',{},`${r[0]}: ${r[2]}`)); svg.appendChild(rect);
    svg.appendChild(el('text',{x:L+w+6,y:i*h+15},r[2]));
  });
}
hbars('optypes', P.op_types.map(r=>[r.op_type+' x'+r.count, timed?r.time_ms:r.flops,
  timed?`${fmt(r.time_ms)} ms (${fmt(r.percent,1)}%)`:`${si(r.flops)}FLOPs`]));

(function layerChart(){
  const svg=document.getElementById('layerchart'); const W=900,H=220,B=20;
  svg.setAttribute('viewBox',`0 0 ${W} ${H+B}`);
  const max=Math.max(1e-12,...layers.map(val)); const bw=W/Math.max(1,layers.length);
  layers.forEach((e,i)=>{const v=val(e),h=H*v/max;
    const r=el('rect',{x:i*bw,y:H-h,width:Math.max(bw-1,1),height:Math.max(h,0.5),
      fill:e.fallback?'#d93025':(e.device==='gpu'?'#3b6fd8':'#2a9d6f')});
    r.appendChild(el('title',{},`${e.name} (${e.op_type}) ${fmt(v)} ${unit}${e.fallback?' — CPU fallback':''}`));
    svg.appendChild(r);});
  svg.appendChild(el('text',{x:0,y:H+15},`${layers.length} layers in execution order; max ${fmt(max)} ${unit}`));
})();

(function roofline(){
  const svg=document.getElementById('roofline'); const c=P.ceilings;
  const pts=layers.filter(e=>e.flops>0&&e.bytes>0&&e.gflops_per_s);
  if(!c||!pts.length){svg.replaceWith(Object.assign(document.createElement('p'),{textContent:'No roofline: '+(c?'no timed layers with FLOPs':'ceilings were not measured'),className:'note'}));return;}
  const W=700,H=360,L=60,B=40; svg.setAttribute('viewBox',`0 0 ${W} ${H}`);
  const ais=pts.map(e=>e.flops/e.bytes), perf=pts.map(e=>e.gflops_per_s);
  const x0=Math.log10(Math.min(...ais,0.01))-0.3, x1=Math.log10(Math.max(...ais,100))+0.3;
  const y0=Math.log10(Math.min(...perf,c.peak_gflops_per_s/1e3))-0.3, y1=Math.log10(Math.max(...perf,c.peak_gflops_per_s))+0.3;
  const X=a=>L+(W-L-10)*(Math.log10(a)-x0)/(x1-x0), Y=p=>(H-B)-(H-B-10)*(Math.log10(p)-y0)/(y1-y0);
  svg.appendChild(el('rect',{x:L,y:10,width:W-L-10,height:H-B-10,fill:'#fafbfd',stroke:'#ccd'}));
  const ridge=c.peak_gflops_per_s/c.peak_gb_per_s; const a0=Math.pow(10,x0),a1=Math.pow(10,x1);
  svg.appendChild(el('polyline',{points:`${X(a0)},${Y(a0*c.peak_gb_per_s)} ${X(ridge)},${Y(c.peak_gflops_per_s)} ${X(a1)},${Y(c.peak_gflops_per_s)}`,fill:'none',stroke:'#444','stroke-width':2}));
  pts.forEach(e=>{const p=el('circle',{cx:X(e.flops/e.bytes),cy:Y(e.gflops_per_s),r:4,fill:e.fallback?'#d93025':(e.bound==='compute'?'#e08a00':'#3b6fd8'),opacity:0.8});
    p.appendChild(el('title',{},`${e.name} (${e.op_type}): ${fmt(e.flops/e.bytes,2)} FLOP/B, ${fmt(e.gflops_per_s,2)} GFLOP/s, ${e.bound}`));svg.appendChild(p);});
  svg.appendChild(el('text',{x:L,y:H-8},'arithmetic intensity (FLOP/byte, log)'));
  svg.appendChild(el('text',{x:12,y:20},'GFLOP/s (log)'));
  svg.appendChild(el('text',{x:W-12,y:Y(c.peak_gflops_per_s)-4,'text-anchor':'end'},`peak ${fmt(c.peak_gflops_per_s,1)} GFLOP/s · ${fmt(c.peak_gb_per_s,1)} GB/s`));
})();

const cols=[['#','index'],['layer','name'],['op','op_type'],['device','device'],['ms','time_ms'],['%','percent'],
  ['FLOPs','flops'],['bytes','bytes'],['params','params'],['GFLOP/s','gflops_per_s'],['GB/s','gb_per_s'],['bound','bound'],['prune 50/70/90% ΔL2','pruning'],['est. saved ms @90%','saved']];
function cell(e,k){
  if(k==='pruning')return e.pruning?e.pruning.relative_l2_change.map(v=>v.toPrecision(3)).join(' / '):'';
  if(k==='saved')return e.pruning?fmt(e.pruning.estimated_saved_ms.slice(-1)[0]):'';
  if(k==='op_type')return e.op_type+(e.fused_activation?'+'+e.fused_activation:'');
  if(['flops','bytes','params'].includes(k))return si(e[k]);
  if(k==='device')return e.device;
  return typeof e[k]==='number'&&!Number.isInteger(e[k])?fmt(e[k]):(e[k]===null||e[k]===undefined?'-':String(e[k]));}
function sortKey(e,k){if(k==='pruning')return e.pruning?e.pruning.relative_l2_change.slice(-1)[0]:-1;if(k==='saved')return e.pruning?e.pruning.estimated_saved_ms.slice(-1)[0]:-1;const v=e[k];return v===null||v===undefined?-Infinity:v;}
let sortState={k:timed?'time_ms':'flops',dir:-1};
function renderTable(){
  const t=document.getElementById('layers'); t.innerHTML='';
  const head=t.createTHead().insertRow();
  cols.forEach(([label,k])=>{const th=document.createElement('th');th.textContent=label+(sortState.k===k?(sortState.dir<0?' ▼':' ▲'):'');
    th.onclick=()=>{sortState={k,dir:sortState.k===k?-sortState.dir:-1};renderTable();};head.appendChild(th);});
  const body=t.createTBody();
  [...layers].sort((a,b)=>{const x=sortKey(a,sortState.k),y=sortKey(b,sortState.k);return (x<y?-1:x>y?1:0)*sortState.dir;}).forEach(e=>{
    const r=body.insertRow(); if(e.fallback)r.className='fallback';
    cols.forEach(([,k])=>{const td=r.insertCell();td.textContent=cell(e,k);
      if(k==='device'&&e.fallback){const s=document.createElement('span');s.className='tag';s.textContent='fallback';td.append(' ',s);}});
  });
}
renderTable();
const rows=[...(P.host||[]).map(r=>[r.name,'',r.time_ms,r.percent]),...(P.transfers||[]).map(r=>[`${r.kind} ${r.tensor}`+(r.layer?` [${r.layer}]`:''),r.bytes,r.time_ms,r.percent])];
const tt=document.getElementById('transfers');
if(rows.length){const h=tt.createTHead().insertRow();['row','bytes','ms','%'].forEach(x=>{const th=document.createElement('th');th.textContent=x;h.appendChild(th);});
  const b=tt.createTBody();rows.forEach(r=>{const tr=b.insertRow();[r[0],r[1]===''?'':si(r[1]),fmt(r[2]),fmt(r[3],1)].forEach(v=>{tr.insertCell().textContent=v;});});}
else tt.replaceWith(Object.assign(document.createElement('p'),{textContent:'No host or transfer rows.',className:'note'}));
document.body.dataset.ready='1';
"""


def _card(label: str, value: Any) -> str:
    return f'<div class="card">{html.escape(label)}<b>{html.escape(str(value))}</b></div>'


def render_html(data: dict[str, Any]) -> str:
    """The HTML document for a profile (data embedded as JSON, charts drawn by inline script)."""
    fp = data["flops_profile"]
    dev = data.get("device") or {}
    ceil = data.get("ceilings") or {}
    ms = data.get("ms_per_batch")
    cards = [
        _card("backend", data["backend"]), _card("device", dev.get("name") or dev.get("cpu") or "?"),
        _card("ms / batch (median)", f"{ms:.3f}" if ms is not None else "not timed"),
        _card("items / s", f"{data['items_per_second']:.1f}" if data.get("items_per_second") else "-"),
        _card("batch · threads", f"{data['batch_size']} · {data['threads']}"),
        _card("GFLOPs", f"{fp['total_flops'] / 1e9:.3f}"), _card("params", f"{fp['total_params']:,}"),
        _card("layers", len(data["layers"])),
        _card("fallback layers", len(data.get("fallback_layers") or [])),
        _card("timer", data.get("timer") or "-"),
    ]
    if ceil:
        cards.append(_card("ceilings (measured)", f"{ceil['peak_gflops_per_s']:.1f} GFLOP/s · {ceil['peak_gb_per_s']:.1f} GB/s"))
    if data.get("time_sum_ratio") is not None:
        cards.append(_card("rows sum / ms per batch", f"{100 * data['time_sum_ratio']:.1f}%"))
    payload = json.dumps(data).replace("</", "<\\/")
    title = html.escape(f"wgsentis profile: {data['name']} on {data['backend']}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title><style>{_STYLE}</style></head>
<body><h1>{title}</h1><p class="note">model {html.escape(str(data['model']))} · created {html.escape(str(data.get('created', '')))}</p>
<div class="summary">{''.join(cards)}</div>
<h2>Time per op type</h2><svg id="optypes" width="100%"></svg>
<h2>Per layer</h2><p class="note">blue: GPU, green: CPU, red: CPU fallback on a GPU backend</p><svg id="layerchart" width="100%" height="260"></svg>
<h2>Roofline</h2><p class="note">orange: compute-bound, blue: memory-bound, red: fallback; the line is the measured ceiling</p><svg id="roofline" width="720" height="370"></svg>
<h2>Layers</h2><p class="note">click a header to sort; pruning: relative L2 change of the outputs at 50/70/90% magnitude sparsity of the layer's weight (CPU); saved ms is an estimate</p><table id="layers"></table>
<h2>Host and transfers</h2><table id="transfers"></table>
<script type="application/json" id="profile-data">{payload}</script>
<script>{_SCRIPT}</script></body></html>
"""
