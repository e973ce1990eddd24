"""The cell classifier: conservative (in doubt irreversible), configurable."""

from __future__ import annotations

import pytest
from agentsnap_core.errors import InvalidInput
from agentsnap_openinterpreter import CommandClassifier

classify = CommandClassifier()


@pytest.mark.parametrize(
    "code",
    [
        "answer = 6 * 7\nprint(answer)",
        "import math, json\nxs = [math.sqrt(i) for i in range(5)]",
        "import numpy as np\na = np.arange(3).sum()",
        "with open('data.csv') as f:\n    rows = f.read().splitlines()",
        "import os\nos.chdir('/tmp')\nos.environ['MODE'] = 'x'",
        "def area(r):\n    return 3.14 * r * r",
    ],
)
def test_python_that_only_computes_is_pure(code):
    assert classify("python", code).kind == "pure"


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("open('notes.txt', 'w').write('x')", "opens a file for writing"),
        ("with open(path, mode) as f:\n    pass", "opens a file for writing"),
        ("import os\nos.remove('a')", "calls remove()"),
        ("import shutil\nshutil.rmtree('build')", "imports shutil"),
        ("import requests\nrequests.post('https://example.com')", "imports requests"),
        ("from pathlib import Path\nPath('x').write_text('y')", "calls write_text()"),
        ("df.to_csv('out.csv')", "calls to_csv()"),
        ("exec(source)", "calls exec()"),
        ("!rm -rf /", "not plain Python (magics, shell escapes or a syntax error)"),
        ("handlers[0]()", "calls a computed function"),
    ],
)
def test_python_with_side_effects_is_irreversible(code, reason):
    v = classify("python", code)
    assert (v.kind, v.reason) == ("irreversible", reason)


def test_a_name_bound_by_an_irreversible_cell_taints_later_cells():
    first = classify("python", "import smtplib\nserver = smtplib.SMTP('mail')")
    assert first.kind == "irreversible" and "server" in first.binds
    assert classify("python", "n = len(server)", tainted=first.binds).kind == "irreversible"
    assert classify("python", "n = len(server)").kind == "pure"


@pytest.mark.parametrize("code", ["ls -la", "cat a.txt | grep x | wc -l", "cd src && pwd", "git status", "echo hi 2>&1",
                                  "find . -name '*.py'", "sed -n 1,5p file", "export A=1; echo $A"])
def test_read_only_shell_is_pure(code):
    assert classify("shell", code).kind == "pure"


@pytest.mark.parametrize("code", ["rm -rf build", "echo x >> log", "mkdir out", "curl https://x", "git push",
                                  "find . -delete", "sed -i s/a/b/ f", "echo $(rm x)", "pip install y", "ls; touch f",
                                  "python script.py"])
def test_shell_with_side_effects_is_irreversible(code):
    assert classify("shell", code).kind == "irreversible"


def test_unknown_languages_are_irreversible_unless_configured():
    assert classify("javascript", "console.log(1)").kind == "irreversible"
    assert CommandClassifier(pure_languages=frozenset({"javascript"}))("javascript", "console.log(1)").kind == "pure"


def test_an_override_wins_and_is_checked():
    mine = CommandClassifier(override=lambda lang, code: "pure" if code.startswith("make -n") else None)
    assert mine("shell", "make -n all").kind == "pure"
    assert mine("shell", "make all").kind == "irreversible"
    with pytest.raises(InvalidInput, match="pure, idempotent or irreversible"):
        CommandClassifier(override=lambda lang, code: "safe")("shell", "ls")


def test_python_binds_are_reported():
    v = classify("python", "import numpy as np\nx, y = 1, 2\ndef f(): pass\nclass C: pass\nfor i in range(2): pass")
    assert v.binds == ("np", "x", "y", "f", "C", "i")


#: cells that change the world although every program / module in them looks harmless (issue 23, item 12)
ADVERSARIAL_SHELL = [
    "env touch X",
    "env -i FOO=1 sh -c 'touch X'",
    "awk 'BEGIN { system(\"touch X\") }'",
    "awk '{ print | \"sh\" }' cmds.txt",
    "awk -i inplace '{ print }' f.txt",
    "sed -n 'w out.txt' in.txt",
    "sed 's/a/b/w out.txt' in.txt",
    "sed '1e touch X' in.txt",
    "sort --output=out.txt in.txt",
    "sort -o out.txt in.txt",
    "sort -uo out.txt in.txt",
    "uniq in.txt out.txt",
    "tree -o out.txt",
    "find . -fprint0 out.txt",
    "git diff --output=patch.txt",
    "git log --output=log.txt",
    "git -c core.pager='touch X' log",
    "date -s 2020-01-01",
    "hostname evil",
    "file -C -m magic",
    "xargs rm < list.txt",
    "ls | xargs -I{} touch {}.bak",
]
ADVERSARIAL_PYTHON = [
    "from pathlib import Path\nPath('log.txt').open('a').write('x')",
    "from pathlib import Path\nPath('a.txt').replace('b.txt')",
    "from pathlib import Path\nPath('link').symlink_to('target')",
    "from pathlib import Path\nPath('hard').hardlink_to('target')",
    "from pathlib import Path\nPath('f').lchmod(0o777)",
    "import os\nos.replace('a', 'b')",
    "import os\nos.mkfifo('pipe')",
    "import os\nos.ftruncate(3, 0)",
    "import io\nio.FileIO('f', 'w')",
    "w = open\nw('x', 'w').write('y')",
    "from os import remove as rm\nrm('x')",
    "import os\nfiles = ['a']\nlist(map(os.remove, files))",
    "import pickle\npickle.loads(blob)",
    "import numpy as np\nnp.memmap('f.dat', mode='w+', shape=(3,))",
    "import pandas as pd\npd.DataFrame().to_markdown('f.md')",
    "import sys\nsys.exit(0)",
    "import sys\nsys.stdout.write('x')",
    "client.send(b'x')",
    "obj.commit()",
    "from pathlib import Path\nfor p in Path('.').glob('*.tmp'):\n    p.unlink()",
    "cleanup = lambda p: p.unlink()\ncleanup(x)",
    "import os\ngetattr(os, 'remove')('x')",
    # loaders that run what they read, readers that run SQL, constructors that create files (pure before)
    "import yaml\nconfigs = list(yaml.unsafe_load_all(open('c.yaml')))",
    "import yaml\nconfigs = list(yaml.full_load_all(open('c.yaml')))",
    "import yaml\nconfigs = list(yaml.load_all(open('c.yaml'), Loader=yaml.UnsafeLoader))",
    "from yaml import unsafe_load_all\nconfigs = list(unsafe_load_all(open('c.yaml')))",
    "import pandas as pd\nframe = pd.read_pickle('frame.pkl')",
    "import pandas as pd\ndone = pd.read_sql('DELETE FROM jobs RETURNING id', 'sqlite:///jobs.db')",
    "import pandas as pd\nrows = pd.read_sql_query('SELECT 1', 'sqlite:///new.db')",
    "import pandas as pd\nrows = pd.read_sql_table('jobs', 'sqlite:///jobs.db')",
    "import pandas as pd\nstore = pd.HDFStore('store.h5')\nstore['df'] = pd.DataFrame()",
    "import pandas as pd\nw = pd.ExcelWriter('report.xlsx')",
    "import numpy as np\ndata = np.loadtxt('https://example.com/data.txt')",
    "import numpy as np\nhost = 'example.com'\ndata = np.genfromtxt(f'https://{host}/data.csv')",
    "from numpy import loadtxt\ndata = loadtxt(fname='http://127.0.0.1:8000/d.txt')",
    "import numpy as np\nds = np.DataSource('cache')",
    "import sympy\nsympy.preview('x', viewer='file', filename='x.png')",
]


@pytest.mark.parametrize("code", ADVERSARIAL_SHELL)
def test_adversarial_shell_cells_are_irreversible(code):
    v = classify("shell", code)
    assert v.kind == "irreversible", v.reason


@pytest.mark.parametrize("code", ADVERSARIAL_PYTHON)
def test_adversarial_python_cells_are_irreversible(code):
    v = classify("python", code)
    assert v.kind == "irreversible", v.reason


@pytest.mark.parametrize(
    "code",
    [
        "text = 'a-b'\nprint(text.replace('-', '+').upper())",
        "from pathlib import Path\nnames = sorted(p.name for p in Path('.').glob('*.py'))",
        "from pathlib import Path\nbody = Path('README.md').read_text().splitlines()[:3]",
        "from pathlib import Path\nwith Path('a.txt').open() as f:\n    first = f.readline()",
        "import json\ndata = json.loads('{\"a\": 1}')\nprint(json.dumps(data))",
        "import os\nprint(os.path.join(os.getcwd(), 'x'), os.listdir('.'), os.environ.get('HOME'))",
        "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})\nprint(df.describe(), df['a'].sum())",
        "def sq(x):\n    return x * x\n\nprint([sq(i) for i in range(3)])",
        "from datetime import datetime\nd = datetime(2020, 1, 1).replace(year=2021)",
        "xs = [3, 1, 2]\nxs.sort()\nxs.append(4)\nd = {}\nd.update(a=1)",
        "import yaml\nconfigs = list(yaml.safe_load_all(open('c.yaml')))\nfirst = yaml.safe_load('a: 1')",
        "import numpy as np\ndata = np.loadtxt('data.txt')\npath = 'data.csv'\nmore = np.genfromtxt(path)",
        "import pandas as pd\nframe = pd.read_csv('data.csv')\nsheet = pd.read_excel('book.xlsx')",
    ],
)
def test_read_only_python_stays_pure(code):
    v = classify("python", code)
    assert v.kind == "pure", v.reason


@pytest.mark.parametrize(
    "code",
    ["awk '{ print $1 }' f.txt", "sed -n '2,4p' f.txt", "sed 's/a/b/g' f.txt", "sort -u f.txt", "uniq -c f.txt",
     "env", "git log --oneline -5", "ls | xargs wc -l", "echo hi >/dev/null", "for f in a b; do cat $f; done"],
)
def test_read_only_shell_stays_pure(code):
    v = classify("shell", code)
    assert v.kind == "pure", v.reason


def test_functions_defined_by_earlier_pure_cells_may_be_called():
    first = classify("python", "def sq(x):\n    return x * x")
    assert first.kind == "pure"
    assert classify("python", "y = sq(3)", defined=first.binds).kind == "pure"
    assert classify("python", "y = sq(3)").kind == "irreversible"
