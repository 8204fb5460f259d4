import json, os, subprocess, sys, math, statistics as st, shutil, time, re
D='/root/.cache/decoder-gate/harness/main-f2af6c09/target'
exe={s: f'{D}/{s}/release/deps/{sys.argv[1]}' for s in ('base','head')}
rounds=int(sys.argv[2]); pats=sys.argv[3].split(',')
ids=[l.split(': ')[0] for l in subprocess.run([exe['base'],'--bench','--list'],capture_output=True,text=True).stdout.splitlines() if l.endswith(': benchmark')]
ids=[i for i in ids if any(p in i for p in pats)]
A=['--bench','--noplot','--warm-up-time','0.1','--measurement-time','0.25','--sample-size','10','--nresamples','1000']
def start(side,i,cpu):
    home=f'/tmp/ilv/cc-{side}'; shutil.rmtree(home, ignore_errors=True)
    pre=['taskset','-c',str(cpu)] if cpu is not None else []
    return subprocess.Popen(pre+[exe[side]]+A+['^'+re.escape(i)+'$'], env=dict(os.environ, CRITERION_HOME=home), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def read(side,i):
    s=json.load(open(f'/tmp/ilv/cc-{side}/{i}/new/sample.json')); v=sorted(t/n for t,n in zip(s['times'],s['iters']))
    return st.quantiles(v,n=4)[0]
data={m:{i:[] for i in ids} for m in 'CS'}
for r in range(rounds):
    for i in ids:
        cb,ch=(0,1) if r%2==0 else (1,0)
        pb=start('base',i,cb); ph=start('head',i,ch); pb.wait(); ph.wait()
        data['C'][i].append(math.log(read('head',i)/read('base',i)))
        order=('base','head') if r%2==0 else ('head','base')
        for s in order: start(s,i,None).wait()
        data['S'][i].append(math.log(read('head',i)/read('base',i)))
for m in 'CS':
    sds=[st.stdev(data[m][i]) for i in ids]
    for i in ids: print(m,i,' '.join('%+.2f'%x for x in data[m][i]))
    print(m,'median sd %.3f'%st.median(sds))
