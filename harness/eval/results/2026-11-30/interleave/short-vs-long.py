import json, os, subprocess, sys, math, statistics as st, shutil, time, re
D='/root/.cache/decoder-gate/harness/main-f2af6c09/target'
exe={s: f'{D}/{s}/release/deps/{sys.argv[1]}' for s in ('base','head')}
rounds=int(sys.argv[2]); out=sys.argv[3]; pats=sys.argv[4].split(',')
ids=[l.split(': ')[0] for l in subprocess.run([exe['base'],'--bench','--list'],capture_output=True,text=True).stdout.splitlines() if l.endswith(': benchmark')]
ids=[i for i in ids if any(p in i for p in pats)]
MODES={'L':['0.2','0.6'],'S':['0.1','0.25']}
def run(side, i, m):
    home=f'/tmp/ilv/sh-{side}'; shutil.rmtree(home, ignore_errors=True)
    a=['--bench','--noplot','--warm-up-time',MODES[m][0],'--measurement-time',MODES[m][1],'--sample-size','10','--nresamples','1000']
    t=time.time()
    subprocess.run([exe[side]]+a+['^'+re.escape(i)+'$'], env=dict(os.environ, CRITERION_HOME=home), capture_output=True, check=True)
    s=json.load(open(f'{home}/{i}/new/sample.json')); v=sorted(t/n for t,n in zip(s['times'],s['iters']))
    return st.quantiles(v,n=4)[0], time.time()-t
data={m:{i:{'base':[],'head':[]} for i in ids} for m in MODES}; secs={m:0.0 for m in MODES}
for r in range(rounds):
    order=('base','head') if r%2==0 else ('head','base')
    for m in (('L','S') if r%2==0 else ('S','L')):
        reps = 1 if m=='L' else 2   # S gets two rounds per L round: about the same time
        for _ in range(reps):
            for i in ids:
                for s in order:
                    v,dt=run(s,i,m); data[m][i][s].append(v); secs[m]+=dt
    json.dump({'data':data,'secs':secs},open(out,'w')); print('round',r,time.strftime('%T'),secs,flush=True)
for m in MODES:
    sds=[]
    for i in ids:
        lr=[math.log(h/b) for b,h in zip(data[m][i]['base'],data[m][i]['head'])]
        se=st.stdev(lr)/math.sqrt(len(lr)); sds.append((st.stdev(lr),se))
        print(m,i,'n %d sd %.3f se %.4f'%(len(lr),st.stdev(lr),se))
    print(m,'median sd %.3f median se %.4f secs %.0f'%(st.median(x[0] for x in sds),st.median(x[1] for x in sds),secs[m]))
