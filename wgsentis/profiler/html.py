"""Self-contained HTML report (no network): summary (FLOPs in a unit that fits the model, executed and as
imported), pruned estimates per level, a summary-type switch (baseline or pruned at a level) over the
op-type and per-layer charts, roofline points, the loss profile (when the profile holds one), the sortable
layer table (fallback layers marked, estimated ms per level) and the host/transfer rows.

The switch also reads the page's hash (``report.html#summary=0.9``), so a link opens a pruned view and a
headless browser can render one without clicking.
"""

# ruff: noqa: E501  (the embedded CSS and JavaScript keep their natural line lengths)
from __future__ import annotations

import html
import json
from typing import Any

from wgsentis.profiler.flops import flops_text

_STYLE = """
body{font:14px system-ui,sans-serif;margin:24px;color:#1d2330;background:#fff}
h1{font-size:22px;margin:0 0 8px}h2{font-size:17px;margin:28px 0 8px}
.summary{display:grid;grid-template-columns:repeat(auto-fill,minmax(220px,1fr));gap:8px}
.card{background:#f1f4f9;border-radius:6px;padding:8px 12px}.card b{display:block;font-size:18px}
table{border-collapse:collapse;width:100%;font-size:13px}th,td{padding:3px 6px;border-bottom:1px solid #e3e7ee;text-align:right}
th{cursor:pointer;background:#e8edf5;position:sticky;top:0}th:hover{background:#d5def0}
#layers td:nth-child(-n+3),#layers th:nth-child(-n+3){text-align:left}tr.fallback td{background:#fdecea}
table.small{width:auto}table.small td:first-child,table.small th:first-child,#transfers td:first-child,#transfers th:first-child{text-align:left}
.tag{background:#d93025;color:#fff;border-radius:3px;padding:0 4px;font-size:11px}
.switch{background:#fff7e0;border:1px solid #f0d48a;border-radius:6px;padding:6px 10px;display:inline-block;margin:4px 0}
svg text{font:11px system-ui,sans-serif}svg text.chart-title{font-size:13px;font-weight:600}svg text.axis-label{fill:#5f6b7a}
.note{color:#5f6b7a;font-size:12px}
"""

_SCRIPT = r"""
const P = JSON.parse(document.getElementById('profile-data').textContent);
const NS = 'http://www.w3.org/2000/svg';
function el(tag, attrs, text){const e=document.createElementNS(NS,tag);for(const k in attrs)e.setAttribute(k,attrs[k]);if(text!==undefined)e.textContent=text;return e;}
function fmt(v,d){return v===null||v===undefined?'-':(typeof v==='number'?v.toFixed(d===undefined?3:d):String(v));}
function si(v){if(v===null||v===undefined)return '-';const u=[['G',1e9],['M',1e6],['k',1e3]];for(const [n,s] of u){if(Math.abs(v)>=s)return (v/s).toFixed(2)+n;}return String(v);}
function pct(level){return String(Math.round(level*1000)/10)+'%';}
function key(level){return String(level);}  // '0.4', '0.95': the keys of estimated_ms (JSON numbers print alike)
function clip(s,n){return s.length>n?s.slice(0,n-1)+'…':s;}
const timed = P.ms_per_batch !== null && P.ms_per_batch !== undefined;
const layers = P.layers;
const levels = timed ? (P.pruning_levels||[]).filter(v=>layers.every(e=>e.estimated_ms&&key(v) in e.estimated_ms)) : [];
const unit = timed ? 'ms' : 'FLOPs';
let view = 'baseline';  // or a level key: the summary type the op-type and per-layer charts show

// Horizontal bars with a title, labels on the left, values on the right and a named x axis.
// rows: {label, value, text, color, tip, ghost} (ghost: a lighter bar behind, the baseline of a pruned view)
function hbars(svg, rows, o){
  svg.innerHTML=''; const h=o.rowHeight||20, W=900, L=o.left||260, T=38, B=36;
  const H=T+rows.length*h+B;
  svg.setAttribute('viewBox',`0 0 ${W} ${H}`); svg.setAttribute('height', H);
  svg.appendChild(el('text',{x:0,y:16,class:'chart-title'},o.title));
  const max=Math.max(1e-12,...rows.map(r=>Math.max(r.value||0,r.ghost||0)));
  const span=W-L-130, X=v=>L+span*v/max;
  rows.forEach((r,i)=>{
    const y=T+i*h;
    const lab=el('text',{x:L-6,y:y+h/2+4,'text-anchor':'end',class:'bar-label'},clip(r.label,44)); lab.appendChild(el('title',{},r.label)); svg.appendChild(lab);
    if(r.ghost!==undefined&&r.ghost!==null){svg.appendChild(el('rect',{x:L,y:y+3,width:Math.max(X(r.ghost)-L,1),height:h-6,fill:'#d7dce5'}));}
    const rect=el('rect',{x:L,y:y+3,width:Math.max(X(r.value||0)-L,1),height:h-6,fill:r.color||'#3b6fd8'});
    rect.appendChild(el('title',{},r.tip||`${r.label}: ${r.text}`)); svg.appendChild(rect);
    svg.appendChild(el('text',{x:Math.max(X(r.value||0),X(r.ghost||0))+6,y:y+h/2+4,class:'bar-value'},r.text));
  });
  const yA=T+rows.length*h+2;
  svg.appendChild(el('line',{x1:L,y1:yA,x2:L+span,y2:yA,stroke:'#889'}));
  svg.appendChild(el('text',{x:L,y:yA+13,class:'axis-tick'},'0'));
  svg.appendChild(el('text',{x:L+span,y:yA+13,'text-anchor':'end',class:'axis-tick'},o.maxText?o.maxText(max):fmt(max)));
  svg.appendChild(el('text',{x:L+span/2,y:yA+28,'text-anchor':'middle',class:'axis-label'},o.xlabel));
  svg.appendChild(el('text',{x:L-6,y:T-4,'text-anchor':'end',class:'axis-label'},o.ylabel));
}

function viewName(){return view==='baseline'?(timed?'baseline (measured)':'FLOPs'):`pruned to ${pct(Number(view))} (estimated)`;}
function layerValue(e){if(!timed)return e.flops; return view==='baseline'?(e.time_ms||0):e.estimated_ms[view];}
function opValue(r){if(!timed)return r.flops; return view==='baseline'?r.time_ms:r.estimated_ms[view];}
function valueText(v){return timed?`${fmt(v)} ms`:`${si(v)}FLOPs`;}

function drawCharts(){
  document.body.dataset.summary=view;
  const pruned=view!=='baseline';
  const total=timed?(pruned?P.pruned_estimates.find(r=>key(r.level)===view).ms_per_batch:P.ms_per_batch):null;
  hbars(document.getElementById('optypes'), P.op_types.map(r=>{const v=opValue(r);return {label:`${r.op_type} x${r.count}`,value:v,
      text:timed?`${fmt(v)} ms`+(pruned?(v!==r.time_ms?` (was ${fmt(r.time_ms)})`:''):` (${fmt(r.percent,1)}%)`):`${si(r.flops)}FLOPs`,ghost:pruned?r.time_ms:undefined};}),
    {title:timed?`Time per op type: ${viewName()}`+(total!==null?`, ${fmt(total)} ms per batch`:''):'FLOPs per op type (not timed)',
     xlabel:timed?(pruned?'estimated time per batch (ms)':'measured time per batch (ms)'):'FLOPs',ylabel:'op type x layers',
     maxText:m=>timed?`${fmt(m)} ms`:`${si(m)}FLOPs`});
  hbars(document.getElementById('layerchart'), layers.map(e=>{const v=layerValue(e);return {label:`${e.name} (${e.op_type})`,value:v,
      text:valueText(v)+(pruned&&v!==e.time_ms?` (was ${fmt(e.time_ms)})`:''),ghost:pruned?e.time_ms:undefined,
      color:e.fallback?'#d93025':(e.device==='gpu'?'#3b6fd8':'#2a9d6f'),
      tip:`${e.name} (${e.op_type}) ${valueText(v)}${pruned?', '+(e.bound==='compute'&&e.prunable_weight?'compute-bound, prunable: scaled by 1 - level':'kept: '+(e.prunable_weight?e.bound+'-bound':'no prunable weight')):''}${e.fallback?' — CPU fallback':''}`};}),
    {title:timed?`Time per layer, in execution order: ${viewName()}`:'FLOPs per layer, in execution order (not timed)',rowHeight:16,
     xlabel:timed?(pruned?'estimated layer time (ms)':'measured layer time (ms)'):'FLOPs',ylabel:'layer (op type)',
     maxText:m=>timed?`${fmt(m)} ms`:`${si(m)}FLOPs`});
}

(function summarySwitch(){
  const sel=document.getElementById('summary-type');
  sel.appendChild(Object.assign(document.createElement('option'),{value:'baseline',textContent:timed?'baseline (measured)':'baseline (FLOPs)'}));
  levels.forEach(v=>sel.appendChild(Object.assign(document.createElement('option'),{value:key(v),textContent:`pruned ${pct(v)} (estimated)`})));
  sel.disabled=levels.length===0;
  const m=/summary=([0-9.]+)/.exec(location.hash); if(m&&levels.some(v=>key(v)===m[1]))view=m[1];
  sel.value=view;
  sel.onchange=()=>{view=sel.value;history.replaceState(null,'','#summary='+view);drawCharts();};
  drawCharts();
})();

(function prunedTable(){
  const t=document.getElementById('pruned'); const rows=(P.pruned_estimates||[]).filter(r=>r.ms_per_batch!==null&&r.ms_per_batch!==undefined);
  if(!rows.length){t.replaceWith(Object.assign(document.createElement('p'),{textContent:timed?'No pruning levels in this profile.':'Not timed: no pruned estimates.',className:'note'}));return;}
  const h=t.createTHead().insertRow();['pruning level','est. ms / batch','speedup','est. saved ms'].forEach(x=>{const th=document.createElement('th');th.textContent=x;h.appendChild(th);});
  const b=t.createTBody();
  const base=b.insertRow();['baseline (measured)',fmt(P.ms_per_batch),'1.00x','-'].forEach(v=>{base.insertCell().textContent=v;});
  rows.forEach(r=>{const tr=b.insertRow();[pct(r.level),fmt(r.ms_per_batch),fmt(r.speedup,2)+'x',fmt(r.saved_ms)].forEach(v=>{tr.insertCell().textContent=v;});});
})();

(function roofline(){
  const svg=document.getElementById('roofline'); const c=P.ceilings;
  const pts=layers.filter(e=>e.flops>0&&e.bytes>0&&e.gflops_per_s);
  if(!c||!pts.length){svg.replaceWith(Object.assign(document.createElement('p'),{textContent:'No roofline: '+(c?'no timed layers with FLOPs':'ceilings were not measured'),className:'note'}));return;}
  const W=700,H=380,L=60,B=40,T=30; svg.setAttribute('viewBox',`0 0 ${W} ${H}`);
  svg.appendChild(el('text',{x:0,y:16,class:'chart-title'},'Roofline: attained GFLOP/s per layer against arithmetic intensity'));
  const ais=pts.map(e=>e.flops/e.bytes), perf=pts.map(e=>e.gflops_per_s);
  const x0=Math.log10(Math.min(...ais,0.01))-0.3, x1=Math.log10(Math.max(...ais,100))+0.3;
  const y0=Math.log10(Math.min(...perf,c.peak_gflops_per_s/1e3))-0.3, y1=Math.log10(Math.max(...perf,c.peak_gflops_per_s))+0.3;
  const X=a=>L+(W-L-10)*(Math.log10(a)-x0)/(x1-x0), Y=p=>(H-B)-(H-B-T)*(Math.log10(p)-y0)/(y1-y0);
  svg.appendChild(el('rect',{x:L,y:T,width:W-L-10,height:H-B-T,fill:'#fafbfd',stroke:'#ccd'}));
  const ridge=c.peak_gflops_per_s/c.peak_gb_per_s; const a0=Math.pow(10,x0),a1=Math.pow(10,x1);
  svg.appendChild(el('polyline',{points:`${X(a0)},${Y(a0*c.peak_gb_per_s)} ${X(ridge)},${Y(c.peak_gflops_per_s)} ${X(a1)},${Y(c.peak_gflops_per_s)}`,fill:'none',stroke:'#444','stroke-width':2}));
  pts.forEach(e=>{const p=el('circle',{cx:X(e.flops/e.bytes),cy:Y(e.gflops_per_s),r:4,fill:e.fallback?'#d93025':(e.bound==='compute'?'#e08a00':'#3b6fd8'),opacity:0.8});
    p.appendChild(el('title',{},`${e.name} (${e.op_type}): ${fmt(e.flops/e.bytes,2)} FLOP/B, ${fmt(e.gflops_per_s,2)} GFLOP/s, ${e.bound}`));svg.appendChild(p);});
  svg.appendChild(el('text',{x:L,y:H-8,class:'axis-label'},'arithmetic intensity (FLOP/byte, log)'));
  svg.appendChild(el('text',{x:4,y:T+12,class:'axis-label'},'GFLOP/s (log)'));
  svg.appendChild(el('text',{x:W-12,y:Y(c.peak_gflops_per_s)-4,'text-anchor':'end'},`peak ${fmt(c.peak_gflops_per_s,1)} GFLOP/s · ${fmt(c.peak_gb_per_s,1)} GB/s`));
})();

(function lossChart(){
  const lp=P.loss_profile; const svg=document.getElementById('losschart');
  if(!svg)return;
  const rows=(lp&&lp.layers)||[];
  if(!rows.length){svg.replaceWith(Object.assign(document.createElement('p'),{textContent:'The loss profile has no layers.',className:'note'}));return;}
  const lv=lp.levels||[...new Set(rows.flatMap(r=>(r.levels||[]).map(x=>x.sparsity)))].sort((a,b)=>a-b);
  const colors=['#9ecae1','#6baed6','#4292c6','#2171b5','#08519c','#08306b','#041d42'];
  const bh=7, gap=8, W=900, L=250, PC=70, T=46, B=36, gh=Math.max(18,lv.length*bh+gap);
  const H=T+rows.length*gh+B; svg.setAttribute('viewBox',`0 0 ${W} ${H}`); svg.setAttribute('height',H);
  svg.appendChild(el('text',{x:0,y:16,class:'chart-title'},`Loss profile: relative L2 change of the outputs when one layer is pruned, per level (inputs: ${lp.inputs||'?'})`));
  lv.forEach((s,j)=>{svg.appendChild(el('rect',{x:L+PC+j*90,y:24,width:10,height:10,fill:colors[j%colors.length]}));svg.appendChild(el('text',{x:L+PC+j*90+14,y:33,class:'legend'},`${pct(s)} sparsity`));});
  const vals=rows.flatMap(r=>(r.levels||[]).map(x=>x.rel_l2||0));
  const max=Math.max(1e-12,...vals), x0=L+PC, span=W-x0-110, X=v=>x0+span*v/max;
  svg.appendChild(el('text',{x:L-6,y:T-4,'text-anchor':'end',class:'axis-label'},'layer (op type)'));
  svg.appendChild(el('text',{x:L+PC-8,y:T-4,'text-anchor':'end',class:'axis-label'},'params'));
  rows.forEach((r,i)=>{
    const y=T+i*gh;
    const lab=el('text',{x:L-6,y:y+gh/2+2,'text-anchor':'end',class:'bar-label'},clip(`${r.name} (${r.op_type})`,40)); lab.appendChild(el('title',{},`${r.name} (${r.op_type}), weights ${(r.weight_names||[]).join(', ')}`)); svg.appendChild(lab);
    svg.appendChild(el('text',{x:L+PC-8,y:y+gh/2+2,'text-anchor':'end',class:'params'},si(r.params)));
    const by=new Map((r.levels||[]).map(x=>[x.sparsity,x]));
    let right=x0;
    lv.forEach((s,j)=>{const x=by.get(s); if(!x)return; const v=x.rel_l2||0;
      const rect=el('rect',{x:x0,y:y+2+j*bh,width:Math.max(X(v)-x0,1),height:bh-1,fill:colors[j%colors.length]});
      rect.appendChild(el('title',{},`${r.name} at ${pct(s)}: rel. L2 ${fmt(v,4)}`+(x.kl!==undefined&&x.kl!==null?`, KL ${fmt(x.kl,4)}`:'')+(x.top1_agreement!==undefined&&x.top1_agreement!==null?`, top-1 agreement ${fmt(x.top1_agreement,3)}`:'')));
      svg.appendChild(rect); right=Math.max(right,X(v));});
    svg.appendChild(el('text',{x:right+6,y:y+gh/2+2,class:'bar-value'},`sensitivity ${fmt(r.sensitivity,4)}`));
  });
  const yA=T+rows.length*gh+2;
  svg.appendChild(el('line',{x1:x0,y1:yA,x2:x0+span,y2:yA,stroke:'#889'}));
  svg.appendChild(el('text',{x:x0,y:yA+13},'0'));svg.appendChild(el('text',{x:x0+span,y:yA+13,'text-anchor':'end'},fmt(max,4)));
  svg.appendChild(el('text',{x:x0+span/2,y:yA+28,'text-anchor':'middle',class:'axis-label'},'relative L2 change of the model outputs (||y_pruned - y|| / ||y||)'));
})();

const sens=P.pruning&&P.pruning.sparsities?P.pruning.sparsities.map(v=>Math.round(100*v)).join('/'):'50/70/90';
const cols=[['#','index'],['layer','name'],['op','op_type'],['device','device'],['ms','time_ms'],['%','percent'],
  ...levels.map(v=>[`est. ms @${pct(v)}`,'est:'+key(v)]),
  ['FLOPs','flops'],['bytes','bytes'],['params','params'],['GFLOP/s','gflops_per_s'],['GB/s','gb_per_s'],['bound','bound'],['prunable','prunable_weight'],
  [`prune ${sens}% ΔL2`,'pruning'],['est. saved ms @'+sens.split('/').slice(-1)[0]+'%','saved']];
function cell(e,k){
  if(k.startsWith('est:'))return fmt(e.estimated_ms?e.estimated_ms[k.slice(4)]:null);
  if(k==='prunable_weight')return e.prunable_weight?'yes':'';
  if(k==='pruning')return e.pruning?e.pruning.relative_l2_change.map(v=>v.toPrecision(3)).join(' / '):'';
  if(k==='saved')return e.pruning?fmt(e.pruning.estimated_saved_ms.slice(-1)[0]):'';
  if(k==='op_type')return e.op_type+(e.fused_activation?'+'+e.fused_activation:'');
  if(['flops','bytes','params'].includes(k))return si(e[k]);
  if(k==='device')return e.device;
  return typeof e[k]==='number'&&!Number.isInteger(e[k])?fmt(e[k]):(e[k]===null||e[k]===undefined?'-':String(e[k]));}
function sortKey(e,k){
  if(k.startsWith('est:')){const v=e.estimated_ms?e.estimated_ms[k.slice(4)]:null;return v===null||v===undefined?-Infinity:v;}
  if(k==='prunable_weight')return e.prunable_weight?1:0;
  if(k==='pruning')return e.pruning?e.pruning.relative_l2_change.slice(-1)[0]:-1;if(k==='saved')return e.pruning?e.pruning.estimated_saved_ms.slice(-1)[0]:-1;const v=e[k];return v===null||v===undefined?-Infinity:v;}
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


def _card(label: str, value: Any, ident: str = "") -> str:
    attr = f' id="{ident}"' if ident else ""
    return f'<div class="card"{attr}>{html.escape(label)}<b>{html.escape(str(value))}</b></div>'


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
        # a unit that fits the model: a 290 kFLOP model read "GFLOPs 0.000" when every model was shown in G
        _card("FLOPs (executed layers)", flops_text(fp["total_flops"]), "card-flops"),
        _card("params (executed layers)", f"{fp['total_params']:,}"),
    ]
    if fp.get("model_total_flops") is not None:
        cards += [_card("FLOPs (model as imported)", flops_text(fp["model_total_flops"]), "card-model-flops"),
                  _card("params (model as imported)", f"{fp['model_total_params']:,}")]
    cards += [
        _card("layers", len(data["layers"])),
        _card("fallback layers", len(data.get("fallback_layers") or [])),
        _card("timer", data.get("timer") or "-"),
    ]
    if ceil:
        cards.append(_card("ceilings (measured)", f"{ceil['peak_gflops_per_s']:.1f} GFLOP/s · {ceil['peak_gb_per_s']:.1f} GB/s"))
    if data.get("time_sum_ratio") is not None:
        cards.append(_card("rows sum / ms per batch", f"{100 * data['time_sum_ratio']:.1f}%"))
    best = [r for r in data.get("pruned_estimates") or [] if r.get("speedup")]
    if best:
        cards.append(_card(f"est. speedup pruned to {100 * best[-1]['level']:g}%", f"{best[-1]['speedup']:.2f}x"))
    payload = json.dumps(data).replace("</", "<\\/")
    title = html.escape(f"wgsentis profile: {data['name']} on {data['backend']}")
    rule = html.escape(data.get("pruned_estimate_rule") or "")
    loss = ""
    if data.get("loss_profile") is not None:
        metrics = ", ".join(str(m) for m in data["loss_profile"].get("metrics") or [])
        loss = ("<h2>Loss profile</h2><p class=\"note\">each layer pruned alone to each level (magnitude pruning), the "
                f"model run on the CPU; plotted: relative L2 change of the outputs; params beside each layer; metrics "
                f"measured: {html.escape(metrics)}</p><svg id=\"losschart\" width=\"100%\"></svg>")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title><style>{_STYLE}</style></head>
<body><h1>{title}</h1><p class="note">model {html.escape(str(data['model']))} · created {html.escape(str(data.get('created', '')))}</p>
<div class="summary">{''.join(cards)}</div>
<h2>Pruned estimates</h2><p class="note">{rule}</p><table id="pruned" class="small"></table>
<h2>Time per op type and per layer</h2>
<div class="switch"><label for="summary-type">Summary type (op-type and per-layer charts): </label><select id="summary-type"></select></div>
<p class="note">pruned views are estimates; the grey bar behind a pruned bar is its measured baseline</p>
<svg id="optypes" width="100%"></svg>
<p class="note">per layer: blue: GPU, green: CPU, red: CPU fallback on a GPU backend</p><svg id="layerchart" width="100%"></svg>
<h2>Roofline</h2><p class="note">orange: compute-bound, blue: memory-bound, red: fallback; the line is the measured ceiling</p><svg id="roofline" width="720" height="390"></svg>
{loss}
<h2>Layers</h2><p class="note">click a header to sort; est. ms: the pruned estimate at each level; pruning: relative L2 change of the outputs at each magnitude sparsity of the layer's weight (CPU); saved ms is an estimate</p><table id="layers"></table>
<h2>Host and transfers</h2><table id="transfers"></table>
<script type="application/json" id="profile-data">{payload}</script>
<script>{_SCRIPT}</script></body></html>
"""
