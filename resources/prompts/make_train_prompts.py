#!/usr/bin/env python3
"""Generate train.jsonl (stdlib only, fixed seed): self-distillation prompts for SmolLM2-135M-Instruct, filled in from
hand-written templates and topics (DATA_TEXT); passages are made-up facts about fictional people, towns, products and events.
Fails loudly if any prompt equals, or shares a 12-word sequence with, a prompt (or turn) in dev.jsonl."""

from __future__ import annotations

import json
import random
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEV, OUT = HERE / "dev.jsonl", HERE / "train.jsonl"
SEED, NGRAM, PER_CAT = 1357, 12, "writing:120 roleplay:100 open_qa:110 summarization:110 translation:100 math:110 coding:110"
PER_CAT += " retrieval:110 brainstorming:90 explanation:90 advice:90 extraction:100 rewriting:90"
TARGETS = {cat: int(n) for cat, n in (x.split(":") for x in PER_CAT.split())}

# DATA_TEXT: "@NAME item|item|..." sections; items wrap across lines, "\n" in an item is a newline, "~" separates its fields,
# "_" is an empty item. T_<category> sections hold the prompt templates. Slots: <KEY> a random item of section KEY (KEY2, KEY3:
# a different one), <KEY.i> its field i, <KEY.q> a random field after the first, <KEY^> capitalized, <KEY*lo-hi> a comma-
# separated sample; <v:lo-hi> or <v:a,b,c> a random number (<!v:...> sets it silently), <v> its value, <=expr> Python over
# those values, picked items and R(lo, hi). Slots inside a picked item share its scope, so a passage and its questions agree.
DATA_TEXT = r"""
@FIRST Amara|Bruno|Celia|Dario|Esme|Felix|Greta|Hamid|Ines|Jonah|Keiko|Lior|Mireille|Nico|Odette|Pavel|Quinn|Rosalind|Sunil|Talia|
Ulrich|Vera @LAST Abernathy|Brightwater|Castellan|Dunmore|Ellery|Fairbanks|Galloway|Holloway|Ivanova|Jessup|Kettering|Lindqvist|
Marchetti|Nakamura|Oyelaran|Pemberton @PERSON <FIRST> <LAST> @TOWN Ashcombe|Briarwood|Coldharbor|Dunwick|Eastmere|Fernhollow|
Glenrook|Hollin Bay|Ironvale|Juniper Falls|Kestrel Point|Larkspur|Mossford|Norrow|Oakhurst|Pellham Cross|Quarry Hill|Redwater|
Saltmarsh|Thistledown @CO Aldergate Tools|Bluefen Foods|Copperleaf Media|Driftline Bikes|Emberly Candles|Foxglove Software|Granite
and Pine Outfitters|Halcyon Clinics|Inkwell Stationery|Juno Solar|Kitewing Toys|Lanternfish Games @MONTH January|February|March|
April|May|June|July|August|September|October|November|December @DAY Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday
@PRODUCT Tidewell~smart water jug~glows softly when it is time for another glass~its clean, simple look~the app logs you out too
often|Lumo Pocket~folding reading lamp~folds flat enough to slip between the pages of a book~the warm, even light~the clip is a
little weak|Quillpad S~e-ink note tablet~turns handwritten notes into typed text~how natural the pen feels~syncing is slow|Brisk
One~electric scooter~folds in three seconds and fits under a desk~the smooth ride~it struggles on steep hills|Trailmark 5~hiking
watch~shows offline maps and warns you before a storm~the bright screen~the strap rubs after a long day|Aeris Go~portable air
purifier~cleans the air of a small bedroom in twenty minutes~how quiet it is~the filters are expensive|Pebble Cam~pocket camera
for children~survives drops from a kitchen table~the chunky, easy buttons~photos look grainy indoors|Glint~bicycle light~brightens
automatically when cars approach~the long battery life~the mount only fits thin handlebars|Sprig~garden soil sensor~texts you when
your plants need water~how easy it was to set up~the readings jump around after rain|Orbit Mini~robot lawn mower~maps the garden
on its first run~the tidy finish on the grass~it gets stuck on tree roots @PLAN build a covered skate park next to the swimming
pool~teenagers have nowhere to meet in winter~the noise would bother neighbors|add protected bike lanes along Mill Road~cycling to
school would become much safer~losing parking spaces would hurt small shops|open a weekly farmers' market on the old bus depot
site~it would support local growers~market traffic would block side streets|replace every street light with low-energy lamps~the
town would save money within six years~the new light looks too harsh|turn the closed cinema into a youth arts center~young people
need a creative space~the building is too costly to heat|plant four hundred trees along the river path~the path is far too hot in
summer~roots could damage the old stone walls|run a free shuttle bus to the train station~many older residents no longer drive~too
few people would use it @SHOP bakery|hardware store|flower stall|bicycle repair shop|bookshop|fish market stand|tailoring
business|corner grocery @FIELD marine biology|architecture|accounting|music theory|civil engineering|nursing|graphic design|
agricultural science|chemistry @CAREER spent a decade designing bridges|worked as a ship's doctor|taught at a rural school|ran the
night shift at a busy hospital|managed a chain of greenhouses|mapped coral reefs for a research team @ORG a repair café network|a
small publishing house|a seed library|a sailing school for teenagers|a company that recycles old phones|a clinic for injured
wildlife @TRAIT patient and fiercely organized|quiet but very funny|demanding yet generous with praise|endlessly curious|calm in a
crisis @HOBBY keeps bees|restores vintage motorbikes|sings in a choir|climbs sea cliffs|paints lighthouses in watercolor @BOOK the
history of canals|growing vegetables on balconies|forgotten women inventors|night-time bird migration|fixing old radios @PRON
she~her~her|he~him~his @EVENT harvest fair|kite festival|night market|book swap|river cleanup day|chess open|lantern parade|bread
baking contest|film week|charity fun run|jazz weekend|seed exchange @VENUE the old grain hall|Riverside Park|the public library|
the community center|the market square|the town pier|the botanical garden @ACT a brass band from the coast|a cheese tasting tent|a
workshop on building bird boxes|a children's puppet show|a quiz about local history|a stall selling honey from twelve hives|a talk
by a retired astronaut|a pie-eating race @REQ bring their own cups~the festival is trying to cut plastic waste|leave dogs at
home~the venue gets very crowded|come by bike or on foot~there are only forty parking spaces|bring cash~the phone signal in the
area is weak @RAIN everything moves indoors to the school hall|the event is postponed by one week|only the outdoor stalls are
cancelled @TREND up~<UPWHY>|down~<DOWNWHY> @UPWHY strong sales of its new spring range|a popular partnership with a supermarket
chain|lower delivery costs|a busy holiday season @DOWNWHY a long, wet summer|delays at its main supplier|a costly product recall|
fierce price cuts by a rival @INIT launch an online shop|start a repair service for older products|switch its delivery vans to
electric ones|open a training center for apprentices @QUARTER first|second|third|fourth @FOUNDER miller~wanted a river strong
enough to turn two wheels|sea captain~was shipwrecked nearby and decided to stay|schoolteacher~was looking for cheap land to build
a school|tin miner~found a rich seam in the hills above the valley @GROWTH the railway arrived|a wool mill opened|a new harbor
wall was built|a bridge replaced the old ferry @LANDMARK a stone bridge with seven arches|a red-brick water tower|a round
lighthouse painted with blue stripes|a covered market hall @SPECIAL its smoked trout|a yearly boat race|handmade wooden toys|its
pear cider|a choir that has sung every Sunday for a century @FACILITY swimming pool|public library|recycling center|museum of
local history|sports hall|botanical garden @CHANGE The café on the ground floor will close for renovation until the end of the
month.|A new ramp has been added at the side entrance.|Lockers now take tokens instead of coins.|Guided tours will run every
Saturday at eleven. @RULE dogs are no longer allowed inside, except assistance dogs|children under eight must be with an adult|
bags larger than a backpack must be left at the front desk|food may only be eaten in the picnic area @DUR two weeks|a month|three
months|half a year @WHYBOUGHT my old one broke|a friend recommended it|it was on sale|I wanted a treat for myself @TRUTH true|
mostly true|only half true @PASSAGE At a <DAY> evening meeting, the <TOWN> town council approved by <y:4-7> votes to <=R(1,y-1)> a
proposal to <PLAN.0>. The proposal, put forward by councillor <PERSON>, will cost about <=format(R(40,900)*1000,',')> dollars and
should take <m:3-18> months. Supporters argued that <PLAN.1>. Critics, among them local shop owner <PERSON2>, said <PLAN.2>. Work
is due to begin in <MONTH>.~How many council members voted against the proposal?~Who put the proposal forward?~How much will the
proposal cost?~When is work due to begin?~What was <PERSON2>'s objection?|<CO> has unveiled the <PRODUCT.0>, a <PRODUCT.1> that
<PRODUCT.2>. It weighs <=R(12,180)*10> grams, runs for up to <h:6-40> hours on one charge, and will cost <=R(3,40)*10-1> dollars.
Sales start on <MONTH> <d:1-28> in <c:2-14> countries. Lead designer <PERSON> said the team spent <y:2-5> years on it. Early
testers praised <PRODUCT.3> but noted that <PRODUCT.4>.~How much will the <PRODUCT.0> cost?~When do sales start, and in how many
countries?~Who is the lead designer?~What did early testers dislike?~How long does the battery last?|<PERSON> grew up in <TOWN>,
where <PRON.0> helped in <PRON.2> family's <SHOP> until the age of <a:15-19>. After studying <FIELD> in <TOWN2>, <PRON.0>
<CAREER>. In <y:1995-2021> <PRON.0> founded <ORG>, which now employs <n:6-240> people. Colleagues describe <PRON.1> as <TRAIT>.
Outside work, <PRON.0> <HOBBY>, and <PRON.0> has written <b:2-6> books, the latest about <BOOK>.~Where did <PERSON> grow up?~What
did <PERSON> study, and where?~What organization did <PERSON> found, and in which year?~How many people work for the organization
<PERSON> founded?~What is the latest book by <PERSON> about?|The <TOWN> <EVENT>, held every year since <y:1975-2019>, takes place
on <DAY>, <MONTH> <d:1-28>, at <VENUE>. Gates open at <o:8-11> am, and tickets cost <t:3-15> dollars for adults; children under
<k:5-12> go free. This year's program includes <ACT>, <ACT2>, and <ACT3>. Organizer <PERSON> asks visitors to <REQ.0>, since
<REQ.1>. If it rains, <RAIN>.~What time do the gates open?~How much is an adult ticket?~What happens if it rains?~Who is the
organizer?~Which children get in for free?|<CO> reported <QUARTER>-quarter revenue of <=R(15,900)/10> million dollars, <TREND.0>
<p:2-27> percent on the same period last year. Chief executive <PERSON> put the result down to <TREND.1>. During the quarter the
company opened <s:2-9> new shops in <TOWN> and <TOWN2> but closed its warehouse in <TOWN3>. It plans to hire <=R(2,40)*10> more
staff over the next year and to <INIT>.~Did revenue go up or down, and by how much?~Who is the chief executive?~Where did the
company close a warehouse?~How many new staff does the company plan to hire?~What explanation was given for the result?|I have
owned the <PRODUCT.0> <PRODUCT.1> for <DUR>. I bought it because <WHYBOUGHT>. The box promises that it <PRODUCT.2>, and in my
experience that is <TRUTH>. The best thing about it is <PRODUCT.3>. On the downside, <PRODUCT.4>. Customer support answered my
question in <c:1-6> days. Overall I give it <s:2-5> out of 5 stars. - <PERSON>~What is the reviewer's biggest complaint?~How many
stars did the reviewer give?~Why did the reviewer buy it?~How long has the reviewer owned the product?~How fast did customer
support respond?|<TOWN> was founded in <y:1650-1890> by <PERSON>, a <FOUNDER.0> who <FOUNDER.1>. The settlement grew quickly after
<GROWTH> in <=y+R(12,70)>. Its best-known landmark is <LANDMARK>, completed in <=y+R(75,130)>. Today about
<=format(R(12,600)*100,',')> people live there, and the town is known across the region for <SPECIAL>.~When was <TOWN> founded,
and by whom?~Why did the founder settle there?~What is the town's best-known landmark?~How many people live in the town
today?~What made the settlement grow?|Notice to visitors of the <TOWN> <FACILITY>: from <MONTH> <d:1-28>, opening hours will
change. On weekdays the doors open at <a:7-10> am and shut at <b:5-9> pm; at weekends they open from <c:9-11> am until <e:3-6> pm.
<CHANGE> Please note that <RULE>. Questions can be sent to <FIRST>, our visitor manager, at
<=FIRST.lower()>@<=TOWN.lower().replace(' ','')>.example.~What time does it close on weekends?~When do the new hours start?~Who
should visitors contact with questions, and how?~What rule does the notice mention?~What time does it open on weekdays?
@UNANSWERABLE What is the name of the town's mayor?|How many people complained online about this?|What will happen next year?|What
is the weather forecast for that day? @SUMINST Summarize the following text in two sentences.|Give me a one-paragraph summary of
this.|Write a three-bullet summary of the passage below.|Condense this into a single sentence that a busy reader could skim.|
Summarize this for a ten-year-old.|What is the main point of this text? Answer in one or two sentences.|Write a headline and a
one-sentence summary for the text below.|Shorten this to about 30 words without losing the key facts.|Summarize this in plain
language, leaving out the numbers.|Sum this up in three short bullet points, most important first.|Summarize the text below, then
list one question a reader might still have. @T_summarization <SUMINST>\n\n<PASSAGE.0>|<SUMINST>\n\n<PASSAGE.0>|
<PASSAGE.0>\n\n<SUMINST> @T_retrieval Answer the question using only the passage.\n\n<PASSAGE.0>\n\nQuestion: <PASSAGE.q>|Here is
a document:\n\n<PASSAGE.0>\n\n<PASSAGE.q> If the document does not say, reply that it is not mentioned.|
Passage:\n<PASSAGE.0>\n\nUsing only this passage, answer briefly: <PASSAGE.q>|<PASSAGE.q>\n\nUse this text to
answer:\n\n<PASSAGE.0>|Context: <PASSAGE.0>\n\n<PASSAGE.q> Quote the sentence that supports your answer.|<PASSAGE.0>\n\nQuestion:
<PASSAGE.q> Answer in one sentence.|Read this and tell me: <UNANSWERABLE> If the text does not say, just tell me
so.\n\n<PASSAGE.0> @EXTRINST List every person named in the text together with their role.|Extract all numbers in the text and say
what each one refers to.|Return the main facts from this text as JSON with sensible keys.|Classify this text as news,
advertisement, review, notice, or biography, and explain why in one sentence.|Is the overall tone of this text positive, negative,
or neutral?|Pull out every date and time mentioned in the text.|Make a two-column table (fact, value) of the key details in the
text. @SENT It arrived a day early and works perfectly.|The instructions were useless and I gave up after an hour.|Honestly the
best purchase I made this year.|It looks nice, but it broke within a week.|The staff were friendly although the wait was long.|My
kids love it and so do I.|Good value for the price, if a little noisy. @HEADLINE Local swimmer breaks regional record at <TOWN>
pool|<TOWN> council approves budget for new bus routes|Researchers in <TOWN> discover beetle that glows under moonlight|Film shot
in <TOWN> wins audience prize at festival|<TOWN> startup raises funds for cheaper home batteries @FRUITVEG apple|carrot|mango|
spinach|pear|broccoli|plum|onion|kiwi|leek|cherry|cabbage|apricot|beetroot|grape|celery @ANIMAL eagle|dolphin|gecko|salmon|bat|
penguin|tortoise|shark|otter|parrot|cobra|trout|hedgehog|owl|crocodile|tuna @MESSAGE My order came with the wrong size and nobody
replies to my emails.|I just wanted to say the nurse who helped me yesterday was wonderful.|Congratulations, you have won a free
cruise! Click this link to claim it now.|Is the museum open on public holidays?|The app crashes every time I try to upload a
photo.|Can I change my appointment from Tuesday to Thursday? @T_extraction <EXTRINST>\n\n<PASSAGE.0>|<PASSAGE.0>\n\n<EXTRINST>|
<EXTRINST>\n\n<PASSAGE.0>|Classify the sentiment of this review as positive, negative, or mixed:\n\n"<SENT> <SENT2>"|Is this
customer comment positive or negative? "<SENT>"|Sort these into fruits and vegetables: <FRUITVEG*5-9>.|Group these animals into
mammals, birds, reptiles, and fish: <ANIMAL*5-9>.|What topic does this headline belong to: sports, politics, science, business, or
culture?\n\n"<HEADLINE>"|Is this message a complaint, a question, a compliment, a request, or spam? Answer with one
word.\n\n"<MESSAGE>"|Extract the name, phone number, email address and deadline from this voicemail as JSON:\n\n"Hi, it's <PERSON>
from <CO>. I need the signed form back before <DAY> at <h:1-5> pm. Call me on 555-<n:1000-9999> or write to
<=PERSON.split()[0].lower()>@<=CO.split()[0].lower()>.example."|Which of these words are verbs? <VERBMIX*6-9> @VERBMIX run|table|
whisper|green|carry|happy|build|window|swim|quickly|forget|cloud @REWRITEINST Rewrite this to sound more professional:|Make this
message more polite:|Fix the grammar and spelling in this text:|Make this shorter without changing its meaning:|Rewrite this so a
young child could understand it:|Turn this into a bulleted list:|Rewrite this in a warmer, friendlier tone:|Rewrite this in the
passive voice where it makes sense:|Rewrite this text as a short, upbeat social media post:|Edit this for clarity and explain your
main changes:|Make this more formal, suitable for a letter to a bank:|Rewrite this as a text message to a friend: @REWRITESRC hey
so the meeting got moved to thursday, bring the slides if u have them, thx|I think maybe we could possibly try to consider
changing the supplier if that's okay with everyone.|Your package is late because the warehouse had a problem. We don't know when
it will come.|Send me the report today. I needed it yesterday.|The printer on the second floor is broken again, please stop using
it until someone fixes it.|I cant come to practise tomorow because my sister are visiting and we has plans.|Their going to
announce the winners on friday, its going to be excited.|The team finished the project. The manager praised the team. The client
signed the contract.|Our new café serves coffee, tea, pastries, and soup, and it opens at seven every morning except Sunday.|Don't
forget to water the tomatoes, feed the cat twice, and lock the back door when you leave.|I'm writing to complain because the
heater you installed last week makes a loud clicking noise all night.|The results was not as good as we hoped but we learned alot.
@T_rewriting <REWRITEINST>\n\n<REWRITESRC>|<REWRITEINST>\n\n<REWRITESRC>|<REWRITEINST>\n\n<REWRITESRC>|
<REWRITEINST>\n\n<PASSAGE.0>|Here is my draft: "<REWRITESRC>" Can you improve it? @EN The museum opens at ten, but the café inside
opens an hour earlier.|Could you recommend a good place to eat near here?|We missed the last bus, so we walked home under the
stars.|I would like two tickets for the evening show, please.|The soup is too salty, but the bread is delicious.|It has been
raining all week and the river is very high.|Our neighbors are moving to a small village by the sea.|I forgot my umbrella on the
train this morning.|How long does it take to walk to the old harbor?|The children are building a snowman in the garden.|Is
breakfast included in the price of the room?|This jacket is nice, but do you have it in a larger size? @FOREIGN French~Le marché
ouvre tôt le samedi, alors nous devrions partir avant huit heures.|Spanish~La biblioteca estará cerrada el próximo lunes por
reparaciones.|Spanish~¿A qué hora sale el último autobús hacia el centro?|German~Ich habe meinen Regenschirm im Café vergessen.|
German~Wir treffen uns morgen um halb drei vor dem Rathaus.|Italian~Mia nonna prepara la pasta fatta in casa ogni domenica.|
Portuguese~Eu gosto de caminhar na praia de manhã cedo. @LANG French|Spanish|German|Italian|Portuguese|Dutch|Swedish @PHRASE good
morning|thank you very much|I am allergic to peanuts|happy birthday|where is the pharmacy|see you tomorrow|I am lost|how much does
this cost|nice to meet you|I don't understand @T_translation Translate into <LANG>: "<EN>"|How would you say this in <LANG>?
"<EN>"|Please translate the following sentence to <LANG>.\n\n<EN>|Translate "<EN>" into <LANG> and explain any tricky words.|I'm
traveling soon. How do I say "<EN>" in <LANG>?|Translate this into <LANG>, once formal and once casual: "<EN>"|How do you say
"<PHRASE>" in <LANG>?|What is the <LANG> for "<PHRASE>"? Add a pronunciation hint.|Translate this <FOREIGN.0> sentence into
English: "<FOREIGN.1>"|What does this mean in English? "<FOREIGN.1>"|Translate to English and explain the grammar briefly:
"<FOREIGN.1>" @QUESTION Why do cats purr?|How do bees make honey?|What is the largest ocean on Earth?|Why does bread go stale?|Who
painted the Mona Lisa?|How far away is the Moon?|Why do onions make people cry?|What is the smallest country in the world?|How do
vaccines train the immune system?|Why is the ocean salty?|What is the longest river in Africa?|How do airplanes stay in the air?|
Why do leaves change color in autumn?|How many bones are in the adult human body?|What is a black hole?|Why do we yawn?|How do
magnets work?|Which planet is known as the Red Planet?|Why do stars twinkle?|How long does it take light from the Sun to reach
Earth?|What is the difference between a frog and a toad?|Why do we get hiccups?|What causes thunder?|How are rainbows formed?|Who
invented the telephone?|Why do some animals hibernate?|How do fish breathe underwater?|Why is the Dead Sea called dead?|How does a
compass work?|What is the difference between an ocean and a sea?|Why do our fingers wrinkle in water?|How do volcanoes form?|What
was the Silk Road?|How do glaciers move?|Why does ice float?|What do bats use echolocation for?|Why are flamingos pink?|What is
the difference between a crocodile and an alligator?|Why do we dream?|What does the liver do?|Why can't people breathe in space?|
What were the Olympic Games like in ancient Greece?|How do tides work?|Why do apples turn brown after you cut them? @T_open_qa
<QUESTION>|<QUESTION>|Quick question: <QUESTION>|<QUESTION> Please keep the answer short.|<QUESTION> Explain it like I'm twelve.|
I've always wondered: <QUESTION>|<QUESTION> Give me a two-sentence answer.|My kid just asked me this and I didn't know: <QUESTION>
@CONCEPT compound interest|the water cycle|how a refrigerator keeps food cold|supply and demand|how GPS finds your location|how
the heart pumps blood|machine learning|why we have time zones|how a bill becomes a law|the greenhouse effect|how a credit score
works|how noise-cancelling headphones work|opportunity cost|how a bicycle stays upright|what a recession is|how search engines
rank pages|natural selection|how a battery stores energy|the difference between RAM and storage|how yeast makes bread rise|what an
index fund is|why the Moon has phases|how encryption keeps messages private|the placebo effect|what a carbon footprint is|how an
email travels across the internet|how wind turbines make electricity|how memory works in the brain|the difference between speed
and velocity|how bridges carry heavy loads @AUD a ten-year-old|a complete beginner|my grandmother|a high school student|someone
who hates math|a busy manager @T_explanation Explain <CONCEPT> in simple terms.|Can you explain <CONCEPT> to <AUD>?|Explain
<CONCEPT> using an everyday analogy.|Give me a beginner-friendly explanation of <CONCEPT> in under 100 words.|Explain <CONCEPT>,
then give one real-world example.|What should <AUD> know about <CONCEPT>?|Break down <CONCEPT> into three or four simple steps.|I
never really understood <CONCEPT>. Could you explain it clearly?|Explain <CONCEPT> and mention one common misconception about it.|
Explain <CONCEPT> the way you would to <AUD>. @SIT I keep putting off studying for my exams until the last minute|I just moved to
a new city and don't know anyone|my roommate never cleans the kitchen|I want to start running but get out of breath after five
minutes|I get nervous before job interviews|my teenager barely talks to me anymore|I want to ask my manager for a raise|I have
trouble falling asleep on weeknights|I want to learn to cook but only have a tiny kitchen|I'm thinking about adopting a dog but I
work long hours|I have to give a speech at my sister's wedding and I'm terrified|I want to read more books but never find time|a
coworker keeps taking credit for my work|I'm starting university next month and feel anxious|my neighbor's dog barks all night|I
need to tell a friend I can't lend them money again|I'm planning my first solo trip abroad|I find it hard to say no to extra work
@T_advice <SIT^>. Any advice?|I need some advice: <SIT>. What should I do?|<SIT^>. Give me three practical tips.|What would you
suggest? <SIT^>.|<SIT^>. How should I approach this?|My situation: <SIT>. What are my options?|<SIT^>. Can you give me a simple
plan for the next week?|Be honest with me: <SIT>. What would you do in my place? @IDEA a rainy Saturday with two bored kids|a
small bakery's social media posts|a science fair project about plants|a team-building activity that doesn't feel awkward|a tenth
wedding anniversary on a budget|using up leftover rice|a short story set on a night train|decorating a tiny balcony|healthy snacks
for a long car trip|a neighborhood street party|a gift for a friend who has everything|making a long commute more enjoyable|a
first date that isn't dinner|a board game about ocean exploration|a garden that attracts butterflies|a blog about learning a
language as an adult|an escape room puzzle for teenagers|a charity event for an animal shelter @NAMEFOR a pet hedgehog|a café that
also repairs bicycles|a fantasy kingdom in the mountains|a running club for beginners|a newsletter about houseplants|a robot
vacuum|a board game studio @GOAL make a small apartment feel bigger|meet new people in a new town|stay motivated when learning an
instrument|cut food waste at home|make a boring presentation more interesting|keep a journal consistently @T_brainstorming Give me
<n:3,5,7,10> ideas for <IDEA>.|Brainstorm <n:3,5,7,10> creative ideas for <IDEA>.|I need inspiration for <IDEA>. List <n:3,5,7>
options.|Suggest <n:5,8,10> names for <NAMEFOR>.|Come up with <n:3,5,6> catchy names for <NAMEFOR>, each with a one-line reason.|
What are <n:3,5,7> ways to <GOAL>?|List <n:4,5,6> unusual but practical ways to <GOAL>.|Help me brainstorm: <IDEA>. Give at least
<n:4,6,8> ideas. @SUBJECT a fox crossing a frozen lake|the last day of summer|an old bicycle rusting in a shed|a city bus at
midnight|a grandmother's kitchen|the first snow of the year|a lost sock's adventure|a lighthouse during a storm|morning fog over a
valley|a robot learning to paint|a market on a Sunday morning|a library where books whisper|a cat watching birds through a window|
a train leaving a small station|an empty playground after rain|a dragon who is afraid of heights @PREMISE a baker discovers that
her bread makes people tell the truth|two strangers share an umbrella and realize they are related|a girl finds a map of her town
with one extra street|a retired astronaut opens a flower shop|a boy can understand pigeons|the last tree in a futuristic city
starts to bloom|a mail carrier delivers a letter dated fifty years in the future|a shy ghost wants to join a choir @EMAIL asking
my manager for Friday off to attend a family event|thanking a teacher for helping my son with reading|asking a neighbor to move
their car from my driveway|requesting a refund for a broken coffee maker|following up after a job interview last week|telling my
team that a deadline has moved|apologizing to a client for a late delivery|asking a professor for an extension on an essay @TOAST
my parents' 30th anniversary|a colleague who is retiring after 25 years|my best friend's new job|the opening of a friend's bakery|
my brother's graduation @T_writing Write a haiku about <SUBJECT>.|Write a short rhyming poem about <SUBJECT>.|Write a free-verse
poem about <SUBJECT>, no longer than 12 lines.|Write a limerick about <SUBJECT>.|Write a short story of about <n:80,100,150,200>
words in which <PREMISE>.|Write the opening paragraph of a novel in which <PREMISE>.|Write a children's bedtime story in which
<PREMISE>.|Write a short email <EMAIL>.|Draft a friendly but clear message <EMAIL>.|Write a product description for the
<PRODUCT.0>, a <PRODUCT.1> that <PRODUCT.2>. Keep it under <n:50,60,80,100> words.|Write a catchy slogan and a two-sentence advert
for the <PRODUCT.0> <PRODUCT.1>.|Describe <SUBJECT> in one vivid paragraph.|Write a short, cheerful toast for <TOAST>. @ROLE a
grumpy lighthouse keeper who secretly loves visitors|a medieval blacksmith|a cheerful tour guide in a volcanic national park|a
librarian in a library that only stocks books about dragons|a retired racing driver who now teaches driving lessons|a park ranger
in a forest full of bears|a fortune teller at a traveling circus|a chef who runs a tiny noodle stall|a submarine captain|a wise
old tortoise who has lived for 300 years|a nervous wizard on his first day teaching|a famous detective on vacation|a sea captain
in the 1700s|a stage magician who never reveals tricks|a news anchor reporting from a cheese festival|a time traveler from the
year 2300|a very polite vampire|a football coach at halftime when the team is losing|a barber who knows all the town gossip @MOVE
I'm your new apprentice on my first day. Tell me what I need to know.|Describe your surroundings as I walk in.|A customer just
complained loudly. Show me how you handle it.|Tell me about the strangest day you have ever had.|Introduce yourself to me in a few
sentences.|I bring you surprising news: a famous critic is visiting tomorrow. How do you react?|I want to know the biggest mistake
you ever made.|I'm a reporter interviewing you. What is the best part of your job? @T_roleplay You are <ROLE>. <MOVE> Stay in
character.|Pretend to be <ROLE>. <MOVE>|Let's play a game: you are <ROLE>. <MOVE> Keep it under 120 words.|Role-play as <ROLE>.
<MOVE>|Act as <ROLE> and answer me in character. <MOVE>|For this chat, you're <ROLE>. <MOVE> Use a distinctive voice. @LANGC
Python|JavaScript|TypeScript|Go|Rust|Java|C#|Ruby @TASK checks whether a number is prime|removes duplicate items from a list while
keeping the original order|returns the second largest number in a list|converts a temperature from Celsius to Fahrenheit|merges
two sorted lists into one sorted list|checks if two words are anagrams|finds the most common word in a paragraph|validates that a
string looks like an email address|returns the n-th Fibonacci number|splits a list into chunks of a given size|converts a number
of seconds into hours, minutes and seconds|finds all pairs in a list that add up to a target|computes the median of a list of
numbers|groups a list of words by their first letter|counts how many days are left until a given date|converts a Roman numeral to
an integer|checks if brackets in a string are balanced @SNIPPET def f(xs):\n    return {x: xs.count(x) for x in set(xs)}|
const out = items.filter(i => i.done).map(i => i.title);|
total = 0\nfor i in range(1, 11):\n    if i % 3 == 0:\n        total += i\nprint(total)|
SELECT city, COUNT(*) FROM members GROUP BY city HAVING COUNT(*) > 10;|for f in *.log; do gzip "$f"; done @BUGGY
def average(nums):\n    return sum(nums) / len(nums) - 1|function last(arr) {\n  return arr[arr.length];\n}|
def count_up(n):\n    i = 0\n    while i < n:\n        print(i)|SELECT name FROM staff WHERE salary > AVG(salary); @CODEQ What is
the difference between a list and a tuple in Python?|What does 'git rebase' do, and how is it different from 'git merge'?|What is
recursion? Show a tiny example.|Why is it bad practice to store passwords in plain text?|What is the difference between == and ===
in JavaScript?|How do I read a JSON file in Python?|What does a SQL JOIN do? Give a short example with two tables. @SQL finds the
five most expensive products in a `products(id, name, price)` table|lists every author in `books(id, title, author, year)` who
published more than two books after 2010|computes the total amount spent per customer from `payments(id, customer_id, amount)`|
deletes rows from `sessions(id, user_id, created_at)` that are older than 30 days @T_coding Write a <LANGC> function that <TASK>.|
How would I write a <LANGC> function that <TASK>? Include a short usage example.|Show me <LANGC> code that <TASK>, with comments
explaining each step.|Write a <LANGC> function that <TASK>, and add two simple tests.|Explain what this code
does:\n\n```\n<SNIPPET>\n```|This code has a bug. Find it and give a fixed version:\n\n```\n<BUGGY>\n```|<CODEQ>|Write a SQL query
that <SQL>.|Can you review this snippet and suggest one improvement?\n\n```\n<SNIPPET>\n``` @ITEM stickers|marbles|pencils|
cupcakes|stamps|seashells|postcards|apples|trading cards|beads @MPRE _|_|_|Quick math question:|Can you help me with my homework?
@MSUF _|_|Show your work.|Explain each step.|Give just the final answer.|Walk me through it step by step. @T_math <FIRST> has
<!a:3-12><!b:2-9><=a*b> <ITEM> and shares them equally among <b> friends. How many does each friend get?|A box holds <a:3-12>
<ITEM>. How many <ITEM> are there in <b:2-9> boxes plus <c:5-30> loose ones?|<FIRST> earns $<a:8-25> per hour and works <b:2-8>
hours on Saturday and <=b+2> hours on Sunday. How much does <FIRST> earn that weekend?|What is <p:5,10,15,20,25,40,75>% of
<=R(3,30)*20>?|Solve for x: <a:2-12>x + <c:3-60> = <=a*R(2,9)+c>.|A rectangle is <a:5-20> cm long and <b:2-9> cm wide. What are
its area and its perimeter?|The average of three numbers is <c:20-90>. Two of them are <=c-R(2,15)> and <=c+R(2,9)>. What is the
third number?|Simplify the fraction <!k:2-6><!a:2-9><=a*k>/<=(a+R(1,9))*k>.|A train leaves at <h:6-20>:<m:10,15,20,35,40,55> and
the journey takes <hh:1-4> hours and <mm:5,25,30,45,50> minutes. When does it arrive?|<FIRST> scored <a:55-100>, <b:55-100>,
<c:55-100> and <d:55-100> on four quizzes. What is the average score?|Is <p:51,57,61,73,87,91,97,119,127> a prime number? Explain
how you know.|What is the least common multiple of <a:3-12> and <b:2-9>?|A shop sells <ITEM> in packs of <a:3-12> for $<b:2-9>.
How much do <=a*R(2,6)> <ITEM> cost?|On a map, 1 cm stands for <b:2-9> km. Two villages are <a:3-12>.5 cm apart on the map. How
far apart are they really?|<FIRST> is <a:2-12> years older than <FIRST2>. Together their ages add up to <=2*R(12,60)+a>. How old
is each of them?|<!n:3-8><n> friends split a restaurant bill of $<=n*R(12,40)> equally and each adds a $2 tip. How much does each
person pay?|A square garden has an area of <=R(4,15)**2> square meters. How long is one side?|A phone costs $<=R(20,90)*10>. Its
price goes up by 10% and then down by 10%. What is the final price?|<FIRST> runs <k:2-6> km every weekday and <=2*k> km on
Saturday. How far does <FIRST> run in <b:2-9> weeks?
"""
SLOT = re.compile(r"<(=[^<>]+|!?[A-Za-z][\w.:,*^-]*)>")


def parse(text: str) -> dict[str, list[str]]:
    data: dict[str, list[str]] = {}
    for block in re.split(r"(?:^|\s)@(?=\w+\s)", text)[1:]:
        name, body = block.split(None, 1)
        items = (re.sub(r"\s*\n\s*", " ", x.strip()).replace("\\n", "\n") for x in body.split("|"))
        data[name] = ["" if x == "_" else x for x in items if x]
    return data


DATA = parse(DATA_TEXT)


class Scope:
    """Fills one text; remembers numbers and picked items so that repeated slots agree."""

    def __init__(self, r: random.Random) -> None:
        self.r = r
        self.vars: dict[str, object] = {}
        self.picks: dict[str, tuple[str, list[str], Scope]] = {}

    def fill(self, text: str) -> str:
        return SLOT.sub(lambda m: self.slot(m.group(1)), text)

    def pick(self, key: str) -> tuple[str, list[str], Scope]:
        if key not in self.picks:
            base = key.rstrip("0123456789")
            taken = {v[0] for k, v in self.picks.items() if k.rstrip("0123456789") == base}
            item = self.r.choice([x for x in DATA[base] if x not in taken] or DATA[base])
            self.picks[key] = (item, [f.strip() for f in item.split("~")], Scope(self.r))
        return self.picks[key]

    def slot(self, s: str) -> str:
        r = self.r
        if s.startswith("="):
            v = eval(s[1:], {"R": r.randint}, self.vars)
            return f"{v:g}" if isinstance(v, float) else str(v)
        if ":" in s:
            name, spec = s.lstrip("!").split(":")
            lo, _, hi = spec.partition("-")
            self.vars[name] = r.randint(int(lo), int(hi)) if hi else int(r.choice(spec.split(",")))
            return "" if s.startswith("!") else str(self.vars[name])
        if s[0].islower():
            return str(self.vars[s])
        cap, s = s.endswith("^"), s.rstrip("^")
        if "*" in s:
            key, lo, hi = re.split(r"[*-]", s)
            return ", ".join(r.sample(DATA[key], r.randint(int(lo), int(hi))))
        key, _, field = s.partition(".")
        _, fields, sub = self.pick(key)
        if s not in self.vars:
            self.vars[s] = sub.fill(fields[r.randrange(1, len(fields)) if field == "q" else int(field or 0)])
            if not field:
                self.vars[key] = self.vars[s]
        out = str(self.vars[s])
        return out[:1].upper() + out[1:] if cap else out


def shingles(text: str) -> tuple[str, set[tuple[str, ...]]]:
    """Lower-cased words joined by spaces, and every run of NGRAM consecutive words."""
    ws = re.findall(r"[a-z0-9]+", text.lower())
    return " ".join(ws), {tuple(ws[i : i + NGRAM]) for i in range(len(ws) - NGRAM + 1)}


def main() -> int:
    r = random.Random(SEED)
    rows: list[dict[str, str]] = []
    seen: set[str] = set()
    for cat, target in TARGETS.items():
        got = tries = 0
        while got < target:
            if (tries := tries + 1) > 100 * target:
                sys.exit(f"FAIL: only {got} distinct {cat} prompts")
            template = r.choice(DATA[f"T_{cat}"])  # math gets an optional lead-in and a "show your work"-style tail
            if (prompt := Scope(r).fill(f"<MPRE> {template} <MSUF>" if cat == "math" else template).strip()) not in seen:
                seen.add(prompt)
                got += 1
                rows.append({"id": f"train-{cat}-{got:04d}", "category": cat, "prompt": prompt})
    for template in DATA["PASSAGE"]:  # every passage the templates can make stays within 40-150 words
        lengths = [len(Scope(random.Random(i)).fill(template.split("~")[0]).split()) for i in range(300)]
        if not 40 <= min(lengths) <= max(lengths) <= 150:
            sys.exit(f"FAIL: passage of {min(lengths)}-{max(lengths)} words: {template[:60]!r}")
    dev_rows = [json.loads(line) for line in DEV.read_text(encoding="utf-8").splitlines() if line.strip()]
    dev = [shingles(t) for row in dev_rows for t in ([row["prompt"]] if "prompt" in row else row["turns"])]
    dev_exact, dev_grams = {d[0] for d in dev}, set().union(*(d[1] for d in dev))
    for row in rows:  # no train prompt may equal a dev prompt or share a 12-word run with one
        joined, grams = shingles(row["prompt"])
        if joined in dev_exact or grams & dev_grams:
            sys.exit(f"FAIL: {row['id']} overlaps a dev prompt: {row['prompt'][:100]!r}")
    OUT.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")

    parsed = [json.loads(line) for line in OUT.read_text(encoding="utf-8").splitlines()]
    ids, prompts = [p["id"] for p in parsed], [p["prompt"] for p in parsed]
    bad = [p["id"] for p in parsed if set(p) != {"id", "category", "prompt"} or not p["id"].startswith(f"train-{p['category']}-")]
    if bad or len(set(ids)) != len(ids) or len(set(prompts)) != len(prompts) or len(parsed) != sum(TARGETS.values()):
        sys.exit(f"FAIL: malformed rows {bad[:5]}, or duplicate ids/prompts, or wrong count {len(parsed)}")
    counts, lens = Counter(p["category"] for p in parsed), sorted(len(p.split()) for p in prompts)
    n_templates = sum(len(v) for k, v in DATA.items() if k.startswith("T_") or k.endswith("INST") or k == "PASSAGE")
    topics = "QUESTION CONCEPT SIT IDEA NAMEFOR GOAL SUBJECT PREMISE EMAIL TOAST ROLE MOVE TASK SQL CODEQ EN PHRASE FOREIGN"
    n_topics = sum(len(DATA[k]) for k in (topics + " REWRITESRC PRODUCT PLAN EVENT HEADLINE MESSAGE SNIPPET BUGGY").split())
    print("\n".join(f"{cat:14s} {counts[cat]}" for cat in TARGETS))
    print(f"total {len(parsed)} prompts, {n_templates} templates, {n_topics} topics, {lens[0]}-{lens[-1]} words; no dev overlap")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
