"""No import cycle between the top-level modules of mysqlq (docs/architecture.md, "Layering").

Reads mysqlq/src as text: a module refers to another when its code (not its comments or its
unit tests) names crate::<other>. Prints the cycle and exits 1 when there is one."""
import os,re,sys
root='mysqlq/src'
mods={}
where={}
for dp,dn,fn in os.walk(root):
    for f in fn:
        if not f.endswith('.rs'): continue
        p=os.path.join(dp,f)
        rel=os.path.relpath(p,root)
        top=rel.split('/')[0].replace('.rs','')
        if top in ('lib','__private'): continue
        txt=open(p).read()
        txt=re.split(r'#\[cfg\(test\)\]\s*mod tests',txt)[0]
        txt='\n'.join(l for l in txt.split('\n') if not l.strip().startswith('//'))
        refs=set(re.findall(r'crate::([a-z_]+)',txt))
        for m in re.findall(r'use crate::\{([^;]*)\};',txt,re.S):
            for part in re.split(r'[,\s]+',m):
                part=part.strip()
                if part: refs.add(part.split('::')[0].strip('{}'))
        for r in refs:
            where.setdefault((top,r),[]).append(rel)
        mods.setdefault(top,set()).update(r for r in refs if r!=top)
names=set(mods)
g={k:{r for r in v if r in names} for k,v in mods.items()}
index={};low={};st=[];on=set();res=[];i=[0]
def sc(v):
    index[v]=low[v]=i[0];i[0]+=1;st.append(v);on.add(v)
    for w in g[v]:
        if w not in index: sc(w);low[v]=min(low[v],low[w])
        elif w in on: low[v]=min(low[v],index[w])
    if low[v]==index[v]:
        comp=[]
        while True:
            w=st.pop();on.discard(w);comp.append(w)
            if w==v:break
        if len(comp)>1: res.append(comp)
for v in g:
    if v not in index: sc(v)
if not res:
    print("no import cycle between the modules of mysqlq")
    sys.exit(0)
print("import cycles between the modules of mysqlq:", res)
for c in res:
    for a in c:
        for b in c:
            if b in g[a]: print(a,'->',b,where[(a,b)])
sys.exit(1)
