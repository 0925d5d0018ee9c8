"""The HTML page's stylesheet and script (inline in the page: it fetches nothing). The
script draws only the columns on view, each node as one box with its shape and relation
on it, and checks its own layout (node boxes apart, the details panel off the graphs,
a shape on every node) into ``#selfcheck`` for the browser tests."""

ROW, BOX_W, ARC_W = 38, 250, 36

CSS = """
body{font:13px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2330;background:#fafbfc}
header{padding:12px 18px;border-bottom:1px solid #dde2ea;background:#fff}
h1{font-size:18px;margin:0 0 4px}
h2{font-size:14px;margin:14px 0 6px}
.verdict-verified{color:#1b7f3b}.verdict-violation{color:#c62828}.verdict-unknown{color:#a86f00}
#layout{display:flex;align-items:flex-start;gap:12px;padding:0 18px 18px}
main{flex:1 1 auto;min-width:0}
table{border-collapse:collapse;margin:4px 0}td,th{border:1px solid #dde2ea;padding:2px 8px;text-align:left}
.finding-box{border-left:4px solid #c62828;background:#fff;padding:8px 12px;margin:8px 0}
.finding pre{background:#f4f6f9;padding:6px;margin:4px 0;overflow-x:auto}
.hint{color:#0b6b88}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
.legend span{display:inline-block;margin-right:14px}
.sw{display:inline-block;width:12px;height:12px;border:1px solid #888;vertical-align:-2px;margin-right:4px}
.sw.mismatch{background:#ffd0d0;border-color:#d00000}
#graphs{display:flex;gap:10px;overflow:auto;align-items:flex-start;border:1px solid #dde2ea;background:#fff;
  max-height:78vh}
.graph{flex:0 0 auto;width:%(col_w)dpx}
.graph h3{position:sticky;top:0;margin:0;padding:4px 8px;background:#eef1f6;font-size:13px;z-index:2}
.gbody{position:relative}
.gbody svg{position:absolute;left:0;top:0}
.edge{fill:none;stroke:#b7bfcc;stroke-width:1}
.edge.hl{stroke:#1f4fd6;stroke-width:2}
.node{position:absolute;left:%(arc_w)dpx;width:%(box_w)dpx;height:%(box_h)dpx;box-sizing:border-box;border:1px solid #9aa3b2;
  border-radius:3px;padding:1px 5px;cursor:pointer;overflow:hidden;
  font:11px/15px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;white-space:nowrap}
.node .nm,.node .l2{overflow:hidden;text-overflow:ellipsis}
.node .shape{color:#334;margin-right:6px}
.node .shape.sharded{color:#6a4fb0;font-weight:bold}
.node .shape.mismatch{background:#ffd0d0;color:#a00000;font-weight:bold;border-radius:2px;padding:0 2px}
.node .rel{color:#4a5568}
.s-related{background:#e3f4e8;border-color:#4f9a65}
.s-violated{background:#fde3e3;border-color:#c62828;border-width:2px}
.s-unknown{background:#fff4d6;border-color:#c99a06}
.s-unreached{background:#eeeeee;border-color:#b0b0b0}
.s-unmatched{background:#f6f7f9;border-color:#c3c9d4;border-style:dashed}
.node.finding{outline:3px solid #b00020;outline-offset:-3px}
.node.out .nm{font-weight:bold}
.node.sel{outline:3px solid #1f4fd6;outline-offset:-3px}
.node.peer{outline:3px solid #7a3fd1;outline-offset:-3px}
#details{flex:0 0 330px;position:sticky;top:8px;max-height:calc(100vh - 16px);overflow:auto;background:#fff;
  border:1px solid #aab3c2;box-shadow:0 2px 10px rgba(0,0,0,.15);padding:8px 12px;margin-top:14px;display:none;
  box-sizing:border-box}
#details h4{margin:0 0 4px;word-break:break-all}
#details pre{white-space:pre-wrap}
#details ul{margin:2px 0;padding-left:18px}
#selfcheck,#errors{display:none}
""" % {"col_w": ARC_W + BOX_W + 6, "arc_w": ARC_W, "box_w": BOX_W, "box_h": ROW - 4}

JS = r"""
(function(){
  var started = performance.now();
  var D = JSON.parse(document.getElementById('graph-data').textContent);
  if(!D.cols.length){ document.body.setAttribute('data-ready', '1'); return; }
  var S = D.s, ST = ['related','violated','unknown','unreached','unmatched'];
  var ROW = %(row)d, ARC_W = %(arc_w)d, TOP = 4;
  var byName = D.cols.map(function(c){var m={}; c.name.forEach(function(x,i){m[S[x]]=i;}); return m;});
  var view = [];
  function esc(s){return String(s).replace(/[&<>"]/g,function(c){return {'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c];});}
  function rel(c,i,k){
    var col = D.cols[c], t = S[col.rel[i]], v = col.vary[i];
    if(!v) return t;
    var vals = v[k].split(','), j = 0;
    return t.replace(/\u0001/g, function(){return vals[j++];});
  }
  function brief(t){
    return t.replace(/: the ranks' values combine to it/, '').replace(/ \(across ranks: (.*)\)$/, ' \u00b7 $1');
  }
  function shapeText(col,i){
    var sh = S[col.shape[i]] || 'no shape', sd = col.sd ? col.sd[i] : 0;
    if(!sd) return [sh, ''];
    var other = S[D.cols[0].shape[col.cmp[i]]];
    return sd === 2 ? [sh+' vs '+other, 'mismatch'] : [sh, 'sharded', other];
  }
  function defaultView(){ return D.cols.map(function(c,i){return {c:i, rank:null};}); }
  function label(v){
    var col = D.cols[v.c];
    if(v.rank === null || col.ranks.length === 1) return col.label;
    return 'rank '+v.rank+' of '+col.label.replace(/ \(identical\)$/, '');
  }
  function column(v,g){
    var col = D.cols[v.c], k = v.rank === null ? 0 : col.ranks.indexOf(v.rank), n = col.n;
    var out = {}; col.out.forEach(function(i){out[i]=1;});
    var fin = {}; col.fin.forEach(function(i){fin[i]=1;});
    var h = [], d = [];
    for(var i=0;i<n;i++){
      var y = TOP + i*ROW, cy = y + (ROW-4)/2, ins = col['in'][i];
      for(var a=0;a<ins.length;a++){
        var j = ins[a], cj = TOP + j*ROW + (ROW-4)/2, b = Math.min(ARC_W-4, 5+4*Math.sqrt(i-j));
        d.push('M'+ARC_W+','+cj+'C'+(ARC_W-b)+','+cj+' '+(ARC_W-b)+','+cy+' '+ARC_W+','+cy);
      }
      var r = rel(v.c,i,k), st = ST[col.st[i]], sh = shapeText(col,i);
      var cls = 'node s-'+st+(fin[i]?' finding':'')+(out[i]?' out':'');
      var tip = S[col.name[i]]+' = '+S[col.op[i]]+' '+S[col.shape[i]]+'\nstatus: '+st+'\n'+r+(col.src[i]?'\nat '+S[col.src[i]]:'');
      h.push('<div class="'+cls+'" id="g'+g+'n'+i+'" data-g="'+g+'" data-i="'+i+'" style="top:'+y+'px" title="'+esc(tip)+'">'+
             '<div class="nm">'+esc(S[col.name[i]]+' = '+S[col.op[i]])+(out[i]?' \u21e5':'')+'</div>'+
             '<div class="l2"><span class="shape '+sh[1]+'">'+esc(sh[0])+'</span><span class="rel">'+esc(brief(r))+
             '</span></div></div>');
    }
    var height = TOP*2 + n*ROW;
    return '<div class="graph" data-label="'+esc(label(v))+'"><h3>'+esc(label(v))+' ('+n+' nodes)</h3>'+
      '<div class="gbody" style="height:'+height+'px"><svg width="'+ARC_W+'" height="'+height+'">'+
      '<path class="edge" d="'+d.join('')+'"/><path class="edge hl" id="hl'+g+'" d=""/></svg>'+h.join('')+'</div></div>';
  }
  function render(v){
    view = v;
    document.getElementById('graphs').innerHTML = view.map(column).join('');
    document.getElementById('details').style.display = 'none';
  }
  function el(g,i){return document.getElementById('g'+g+'n'+i);}
  function clear(){
    document.querySelectorAll('.sel,.peer').forEach(function(e){e.classList.remove('sel','peer');});
    document.querySelectorAll('.edge.hl').forEach(function(p){p.setAttribute('d','');});
  }
  function select(g,i,scroll){
    clear();
    var v = view[g], col = D.cols[v.c], e = el(g,i), name = S[col.name[i]];
    e.classList.add('sel');
    var cy = TOP + i*ROW + (ROW-4)/2;
    document.getElementById('hl'+g).setAttribute('d', col['in'][i].map(function(j){
      var cj = TOP + j*ROW + (ROW-4)/2, b = Math.min(ARC_W-4, 5+4*Math.sqrt(i-j));
      return 'M'+ARC_W+','+cj+'C'+(ARC_W-b)+','+cj+' '+(ARC_W-b)+','+cy+' '+ARC_W+','+cy;}).join(''));
    view.forEach(function(w,h){
      if(h === g) return;
      var other = D.cols[w.c];
      if(v.c > 0 && w.c > 0 && name in byName[w.c]) el(h, byName[w.c][name]).classList.add('peer');
      if(v.c > 0 && w.c === 0 && col.of[i] >= 0) el(h, col.of[i]).classList.add('peer');
      if(v.c === 0 && w.c > 0) other.of.forEach(function(o,j){if(o === i) el(h,j).classList.add('peer');});
    });
    var src = S[col.src[i]], href = D.href[col.src[i]];
    var source = src ? (href ? '<a href="'+esc(href)+'">'+esc(src)+'</a>' : esc(src)) : 'unknown';
    var sh = shapeText(col,i), rels;
    if(col.ranks.length > 1 && v.rank === null && col.vary[i]){
      rels = '<div><b>relation</b> on each rank</div><ul>'+col.ranks.map(function(r,k){
        return '<li>rank '+r+': '+esc(rel(v.c,i,k))+'</li>';}).join('')+'</ul>';
    } else {
      rels = '<div><b>relation</b> '+(col.ranks.length > 1 && v.rank === null ? 'on every rank: ' : '')+
        esc(rel(v.c,i,v.rank === null ? 0 : col.ranks.indexOf(v.rank)))+'</div>';
    }
    var d = document.getElementById('details');
    d.innerHTML = '<h4>'+esc(label(v))+': '+esc(name)+'</h4>'+
      '<div><b>op</b> <code>'+esc(S[col.op[i]])+'</code> '+esc(sh[0])+(sh[1]==='mismatch'?
        ' <b>(the shape differs from single-device '+esc(S[D.cols[0].name[col.cmp[i]]])+')</b>':
        sh[1]==='sharded' ? ' (single-device '+esc(S[D.cols[0].name[col.cmp[i]]])+': '+esc(sh[2])+')' : '')+'</div>'+
      '<div><b>status</b> '+ST[col.st[i]]+'</div>'+rels+
      '<div><b>inputs</b> '+esc(col['in'][i].map(function(j){return S[col.name[j]];}).join(', ')||'none')+'</div>'+
      '<div><b>source</b> '+source+'</div>'+(col.code[i] ? '<pre>'+esc(S[col.code[i]])+'</pre>' : '');
    d.style.display = 'block';
    if(scroll) e.scrollIntoView({block:'center', inline:'center'});
  }
  document.getElementById('graphs').addEventListener('click', function(ev){
    var e = ev.target.closest('.node');
    if(e) select(+e.dataset.g, +e.dataset.i, false);
  });
  var chooser = document.getElementById('rank-choice');
  function choose(value){
    if(value === '') return render(defaultView());
    var r = +value, c = D.cols.findIndex(function(col){return col.ranks.indexOf(r) >= 0;});
    if(c < 0) return render(defaultView());
    render(D.cols[0].ranks[0] === null ? [{c:0, rank:null}, {c:c, rank:r}] : [{c:c, rank:r}]);
  }
  if(chooser) chooser.addEventListener('change', function(){ choose(chooser.value); });
  function gotoNode(c,i){
    var g = view.findIndex(function(v){return v.c === c;});
    if(g < 0){ if(chooser) chooser.value = ''; render(defaultView()); g = c; }
    select(g, i, true);
  }
  document.querySelectorAll('[data-goto]').forEach(function(a){
    a.addEventListener('click', function(ev){
      ev.preventDefault();
      var p = a.dataset.goto.split(':');
      gotoNode(+p[0], +p[1]);
    });
  });
  // report.html#rank=3 opens with rank 3 beside the single device
  var wanted = location.hash.match(/^#rank=(\d+)$/);
  if(wanted && chooser){ chooser.value = wanted[1]; choose(wanted[1]); } else render(defaultView());
  // report.html#finding opens with the first finding's node selected
  var first = document.querySelector('[data-goto]');
  if(location.hash === '#finding' && first){ var q = first.dataset.goto.split(':'); gotoNode(+q[0], +q[1]); }
  selfcheck();
  function box(e){var r = e.getBoundingClientRect(); return {x:r.left, y:r.top, w:r.width, h:r.height};}
  function meets(a,b){return a.x < b.x+b.w && b.x < a.x+a.w && a.y < b.y+b.h && b.y < a.y+a.h;}
  function clip(a,b){var x = Math.max(a.x,b.x), y = Math.max(a.y,b.y);
    return {x:x, y:y, w:Math.max(0, Math.min(a.x+a.w,b.x+b.w)-x), h:Math.max(0, Math.min(a.y+a.h,b.y+b.h)-y)};}
  function selfcheck(){
    var nodes = document.querySelectorAll('.node'), counts = {}, overlaps = 0, noShape = 0, noRelation = 0;
    nodes.forEach(function(e){var s = e.className.match(/s-(\w+)/)[1]; counts[s] = (counts[s]||0)+1;
      if(!e.querySelector('.shape').textContent.trim()) noShape++;
      if(!e.querySelector('.rel').textContent.trim()) noRelation++;});
    var cols = Array.prototype.map.call(document.querySelectorAll('.graph'), function(gr){
      var bs = Array.prototype.map.call(gr.querySelectorAll('.node'), box);
      for(var i=1;i<bs.length;i++) if(meets(bs[i-1], bs[i])) overlaps++;
      return box(gr);});
    for(var a=0;a<cols.length;a++) for(var b=a+1;b<cols.length;b++) if(meets(cols[a],cols[b])) overlaps++;
    var area = box(document.getElementById('graphs')), det = document.getElementById('details');
    var panel = det.style.display === 'block' ? box(det) : null, covered = 0;
    if(panel) cols.forEach(function(c){var v = clip(c, area); if(v.w > 0 && v.h > 0 && meets(v, panel)) covered++;});
    document.getElementById('selfcheck').textContent = JSON.stringify({
      graphs: cols.length, nodes: nodes.length, counts: counts, finding: document.querySelectorAll('.node.finding').length,
      labels: Array.prototype.map.call(document.querySelectorAll('.graph'), function(g){return g.dataset.label;}),
      overlaps: overlaps, no_shape: noShape, no_relation: noRelation, panel_covers_graphs: covered, panel: panel, graphs_box: area,
      mismatch: document.querySelectorAll('.shape.mismatch').length, dpr: window.devicePixelRatio,
      ms: Math.round(performance.now() - started)});
  }
  document.body.setAttribute('data-ready', '1');
})();
""" % {"row": ROW, "arc_w": ARC_W}

ERRORS_JS = """window.addEventListener('error', function(e){
  var p = document.getElementById('errors'); if(p) p.textContent += (e.message || 'error') + '\\n';
});"""
